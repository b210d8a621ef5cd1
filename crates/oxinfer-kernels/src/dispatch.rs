//! What runs where: the kernel set, the instruction set of the CPU, and every `OXINFER_*`
//! switch of the kernels. Each is read once per process (at first use) and never again.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `OXINFER_KERNELS` | `auto` (default), `scalar` | `scalar` runs the plain reference kernels everywhere ([`kernel_set`]) |
//! | `OXINFER_VNNI` | `0` | keeps an AVX-512 VNNI CPU on the AVX2 kernels ([`detected_isa`]; A/B runs) |
//! | `OXINFER_PACKED` | `0` | no weight packing: the row-major kernels run ([`packing_enabled`]; A/B runs) |
//! | `OXINFER_ZMM` | `0` | no 512-bit two-group Q4_K/Q6_K kernels on VNNI CPUs ([`zmm_enabled`]; A/B runs) |
//! | `OXINFER_TEST_EXPECT_ISA` | an [`Isa::name`] | tests only: the level the test CPU must reach (CI under qemu) |
//!
//! The thread count belongs to the pool ([`crate::pool::set_num_threads`]).
//!
//! An [`Isa`] other than [`Isa::Scalar`] can only be made by detection ([`detected_isa`],
//! [`available_isas`]): its variants cannot be constructed outside this crate, so a safe
//! kernel entry point that takes one can trust that the CPU has it.
//!
//! ```compile_fail
//! // Only detection hands out a SIMD level.
//! let forged = oxinfer_kernels::dispatch::Isa::Avx2;
//! ```

use std::sync::OnceLock;

/// The variable read by [`kernel_set`].
pub const KERNELS_VAR: &str = "OXINFER_KERNELS";
/// The variable that, set to `0`, keeps an AVX-512 VNNI CPU on the AVX2 kernels.
pub const VNNI_VAR: &str = "OXINFER_VNNI";
/// The variable that, set to `0`, turns weight packing off ([`packing_enabled`]).
pub const PACKED_VAR: &str = "OXINFER_PACKED";
/// The variable that, set to `0`, turns the 512-bit two-group kernels off ([`zmm_enabled`]).
pub const ZMM_VAR: &str = "OXINFER_ZMM";

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
                        "oxinfer: warning: unknown {KERNELS_VAR}={v:?} (expected \"scalar\" or \"auto\"); using auto"
                    )),
                ),
            },
        }
    }
}

/// The value of environment variable `name`, if set (lossily decoded).
fn env_value(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// Whether an A/B switch value turns its feature off (`0`, surrounding whitespace ignored).
fn switched_off(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim() == "0")
}

/// The kernel set of this process, read once from `OXINFER_KERNELS` (default `auto`; an
/// unknown value prints one warning line to stderr and selects `auto`).
pub fn kernel_set() -> KernelSet {
    static SET: OnceLock<KernelSet> = OnceLock::new();
    *SET.get_or_init(|| {
        let (set, warning) = KernelSet::from_env_value(env_value(KERNELS_VAR).as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        set
    })
}

/// Whether weights may be repacked for the packed kernels: `OXINFER_PACKED` is not `0` (read
/// once).
pub fn packing_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !switched_off(env_value(PACKED_VAR).as_deref()))
}

/// Whether the 512-bit two-group Q4_K/Q6_K kernels may run on an [`Isa::Avx512Vnni`] CPU: it
/// also has AVX-512 BW and `OXINFER_ZMM` is not `0` (read once).
pub fn zmm_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        detected_isa().has_vnni()
            && cpu_has_avx512bw()
            && !switched_off(env_value(ZMM_VAR).as_deref())
    })
}

/// Whether the CPU reports AVX-512 BW (the 512-bit byte/word instructions).
#[cfg(target_arch = "x86_64")]
fn cpu_has_avx512bw() -> bool {
    is_x86_feature_detected!("avx512bw")
}

/// Whether the CPU reports AVX-512 BW: never off x86-64.
#[cfg(not(target_arch = "x86_64"))]
fn cpu_has_avx512bw() -> bool {
    false
}

/// An instruction-set level the kernels can run at. Every level but [`Isa::Scalar`] is a
/// proof that the running CPU has it: those variants cannot be constructed outside this crate
/// (only [`detected_isa`] and [`available_isas`] hand them out; match them as `Isa::Avx2 { .. }`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Portable code only (always available).
    Scalar,
    /// AVX2 + FMA + F16C.
    #[non_exhaustive]
    Avx2,
    /// AVX2 + FMA + F16C plus AVX-512 F/VL and VNNI: the packed GEMM/GEMV use `vpdpbusd` on
    /// 256-bit registers; everything else runs the AVX2 kernels.
    #[non_exhaustive]
    Avx512Vnni,
    /// aarch64 Advanced SIMD (NEON), present on every aarch64 CPU.
    #[non_exhaustive]
    Neon,
    /// NEON with the dot-product extension (`sdot`, Armv8.2 `dotprod`).
    #[non_exhaustive]
    NeonDot,
    /// NEON with `dotprod` and the int8 matrix multiply (`smmla`, Armv8.6 `i8mm`).
    #[non_exhaustive]
    NeonI8mm,
}

impl Isa {
    /// Name for `oxinfer devices` and bench output.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2+fma+f16c",
            Isa::Avx512Vnni => "avx512vnni+avx2+fma+f16c",
            Isa::Neon => "neon",
            Isa::NeonDot => "neon+dotprod",
            Isa::NeonI8mm => "neon+dotprod+i8mm",
        }
    }

    /// Whether this set includes AVX2, FMA and F16C (every x86 SIMD set we have does; an
    /// AVX-512 VNNI variant of the row-major 32-weight dots was measured slower than AVX2 on a
    /// Xeon with AVX-512, 25-33 vs 29-32 GFLOP/s per core, and dropped: only the packed
    /// kernels use VNNI).
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::Avx512Vnni)
    }

    /// Whether this set includes AVX-512 F/VL and VNNI (`vpdpbusd` on 256-bit registers).
    pub fn has_vnni(self) -> bool {
        matches!(self, Isa::Avx512Vnni)
    }

    /// Whether this is one of the aarch64 NEON levels.
    pub fn is_neon(self) -> bool {
        matches!(self, Isa::Neon | Isa::NeonDot | Isa::NeonI8mm)
    }
}

/// The best instruction set the running CPU supports (detected once; `OXINFER_VNNI=0` stops
/// at AVX2).
pub fn detected_isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
                    && !switched_off(env_value(VNNI_VAR).as_deref())
                {
                    return Isa::Avx512Vnni;
                }
                return Isa::Avx2;
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            use std::arch::is_aarch64_feature_detected as has;
            if has!("neon") {
                if has!("dotprod") && has!("i8mm") {
                    return Isa::NeonI8mm;
                }
                if has!("dotprod") {
                    return Isa::NeonDot;
                }
                return Isa::Neon;
            }
        }
        Isa::Scalar
    })
}

/// Every instruction set the running CPU supports, scalar first and [`detected_isa`] last
/// (for tests and benches).
pub fn available_isas() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    let best = detected_isa();
    if best.has_avx2() {
        v.push(Isa::Avx2);
    }
    if best.has_vnni() {
        v.push(Isa::Avx512Vnni);
    }
    if best.is_neon() {
        v.push(Isa::Neon);
    }
    if matches!(best, Isa::NeonDot | Isa::NeonI8mm) {
        v.push(Isa::NeonDot);
    }
    if best == Isa::NeonI8mm {
        v.push(Isa::NeonI8mm);
    }
    v
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

    #[test]
    fn switches_turn_off_only_at_zero() {
        assert!(switched_off(Some("0")));
        assert!(switched_off(Some(" 0\n")));
        assert!(!switched_off(None));
        assert!(!switched_off(Some("1")));
        assert!(!switched_off(Some("")));
        assert_eq!(packing_enabled(), packing_enabled());
        // The two-group kernels need the VNNI level.
        assert!(!zmm_enabled() || detected_isa().has_vnni());
    }

    #[test]
    fn every_available_level_is_at_most_the_detected_one() {
        let best = detected_isa();
        for isa in available_isas() {
            assert!(!isa.has_avx2() || best.has_avx2(), "{isa:?} above {best:?}");
            assert!(!isa.has_vnni() || best.has_vnni(), "{isa:?} above {best:?}");
            assert!(!isa.is_neon() || best.is_neon(), "{isa:?} above {best:?}");
        }
    }
}
