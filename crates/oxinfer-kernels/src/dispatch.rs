//! Kernel-set selection: which implementation family the kernels dispatch to.
//!
//! Chosen once per process from the `OXINFER_KERNELS` environment variable:
//! `scalar` (the plain reference code) or `auto` (the best the CPU supports; the default).
//! Today both run the same scalar code; SIMD kernels will be added under [`KernelSet::Auto`].

use std::sync::OnceLock;

/// The environment variable read by [`kernel_set`].
pub const ENV_VAR: &str = "OXINFER_KERNELS";

/// A family of kernel implementations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum KernelSet {
    /// Scalar reference kernels only (for testing and debugging).
    Scalar,
    /// The fastest kernels the running CPU supports (run-time feature detection).
    #[default]
    Auto,
}

impl KernelSet {
    /// Parses an `OXINFER_KERNELS` value: `scalar` or `auto` (case-insensitive, surrounding
    /// whitespace ignored); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "scalar" => Some(Self::Scalar),
            "auto" => Some(Self::Auto),
            _ => None,
        }
    }

    /// The value spelling of this set (`"scalar"` or `"auto"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Auto => "auto",
        }
    }

    /// The set selected by an optional `OXINFER_KERNELS` value, plus a warning line when the
    /// value was not understood (then [`KernelSet::Auto`] is used).
    fn from_env_value(value: Option<&str>) -> (Self, Option<String>) {
        match value {
            None => (Self::Auto, None),
            Some(v) => match Self::parse(v) {
                Some(k) => (k, None),
                None => (
                    Self::Auto,
                    Some(format!(
                        "oxinfer: warning: unknown {ENV_VAR}={v:?} (expected \"scalar\" or \"auto\"); using auto"
                    )),
                ),
            },
        }
    }
}

/// The kernel set of this process, read once from `OXINFER_KERNELS` (default `auto`; an
/// unknown value prints one warning line to stderr and selects `auto`).
pub fn kernel_set() -> KernelSet {
    static SET: OnceLock<KernelSet> = OnceLock::new();
    *SET.get_or_init(|| {
        let value = std::env::var_os(ENV_VAR).map(|v| v.to_string_lossy().into_owned());
        let (set, warning) = KernelSet::from_env_value(value.as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        set
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_values() {
        assert_eq!(KernelSet::parse("scalar"), Some(KernelSet::Scalar));
        assert_eq!(KernelSet::parse(" AUTO\n"), Some(KernelSet::Auto));
        assert_eq!(KernelSet::parse("avx2"), None);
        assert_eq!(KernelSet::from_env_value(None), (KernelSet::Auto, None));
        assert_eq!(
            KernelSet::from_env_value(Some("scalar")),
            (KernelSet::Scalar, None)
        );
        let (k, w) = KernelSet::from_env_value(Some("fast"));
        assert_eq!(k, KernelSet::Auto);
        let w = w.unwrap();
        assert!(w.contains("OXINFER_KERNELS") && w.contains("\"fast\"") && !w.contains('\n'));
        for k in [KernelSet::Scalar, KernelSet::Auto] {
            assert_eq!(KernelSet::parse(k.name()), Some(k));
        }
        // reading the process value works and is stable
        assert_eq!(kernel_set(), kernel_set());
    }
}
