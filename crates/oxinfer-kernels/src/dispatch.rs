//! What runs where: the kernel set, the instruction set of the CPU, and every `OXINFER_*`
//! switch of the kernels. Each is read once per process (at first use) and never again.
//!
//! | variable | values | effect |
//! |---|---|---|
//! | `OXINFER_KERNELS` | `auto` (default), `scalar` | `scalar` runs the plain reference kernels everywhere ([`kernel_set`]) |
//! | `OXINFER_VNNI` | `0` | keeps an AVX-512 VNNI CPU on the AVX2 kernels ([`detected_isa`]; A/B runs) |
//! | `OXINFER_PACKED` | `0`, `all` | `0`: no weight packing, the row-major kernels run (A/B runs); `all`: also pack the formats whose packed copy outgrows the file by more than 1.25× (IQ2/IQ3/IQ1/TQ, for speed at 1.3–2.9× their RAM); unset: the formats that stay within 1.25×, and the others too in a model that as a whole stays within 1.25× packed ([`packing_mode`], [`crate::packed::packing_allowed`], [`crate::packed::model_fits_packed`]) |
//! | `OXINFER_ZMM` | `0`, `1` | forces the 512-bit two-group Q4_K/Q6_K kernels off or on for VNNI CPUs ([`two_group_choice`]); unset, a measured or known-CPU choice decides |
//! | `OXINFER_TUNE` | `0` | no start-up measurement of kernel variants: the known-CPU table decides ([`tuning_enabled`]) |
//! | `OXINFER_HUGEPAGES` | `0` | repacked weights and the memory probe on ordinary pages, not transparent huge pages ([`huge_pages_enabled`]; A/B runs) |
//! | `OXINFER_KV_ROTATION` | `0` | stores Q8_0 / Q4_0 KV rows unrotated ([`kv_rotation_enabled`]; A/B runs) |
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
/// The variable that turns weight packing off (`0`) or on for every packed format (`all`)
/// ([`packing_mode`]).
pub const PACKED_VAR: &str = "OXINFER_PACKED";
/// The variable that forces the 512-bit two-group kernels off (`0`) or on (`1`)
/// ([`two_group_choice`]).
pub const ZMM_VAR: &str = "OXINFER_ZMM";
/// The variable that, set to `0`, turns the start-up measurement of kernel variants off
/// ([`tuning_enabled`]).
pub const TUNE_VAR: &str = "OXINFER_TUNE";

/// The variable that, set to `0`, keeps large weight buffers off transparent huge pages
/// ([`huge_pages_enabled`]).
pub const HUGEPAGES_VAR: &str = "OXINFER_HUGEPAGES";

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

/// The kernel set of this process, once chosen.
static KERNEL_SET: OnceLock<KernelSet> = OnceLock::new();

/// The kernel set of this process, read once from `OXINFER_KERNELS` (default `auto`; an
/// unknown value prints one warning line to stderr and selects `auto`) unless
/// [`set_kernel_set`] chose it first.
pub fn kernel_set() -> KernelSet {
    *KERNEL_SET.get_or_init(|| {
        let (set, warning) = KernelSet::from_env_value(env_value(KERNELS_VAR).as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        set
    })
}

/// Chooses the kernel set of this process instead of `OXINFER_KERNELS`, for hosts without
/// environment variables (the browser). It must come before the first kernel runs: the set is
/// chosen once. Returns the set in effect (`set`, or the one chosen earlier).
pub fn set_kernel_set(set: KernelSet) -> KernelSet {
    *KERNEL_SET.get_or_init(|| set)
}

/// Which weights are repacked for the packed kernels (`OXINFER_PACKED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PackingMode {
    /// No packing: the row-major kernels run (`0`).
    Off,
    /// The default: pack the formats whose packed copy stays within
    /// [`crate::packed::MAX_DEFAULT_GROWTH`] of the file's bytes (unset, `1` or `auto`).
    #[default]
    Compact,
    /// Pack every format that has a packed layout, whatever its memory cost (`all`).
    All,
}

impl PackingMode {
    /// Parses an `OXINFER_PACKED` value (`0`; `1` or `auto`; `all`; case-insensitive,
    /// surrounding whitespace ignored); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "0" => Some(Self::Off),
            "1" | "auto" => Some(Self::Compact),
            "all" => Some(Self::All),
            _ => None,
        }
    }

    /// The mode selected by an optional `OXINFER_PACKED` value, plus a warning line when the
    /// value was not understood (then [`PackingMode::Compact`] is used).
    fn from_env_value(value: Option<&str>) -> (Self, Option<String>) {
        match value {
            None => (Self::Compact, None),
            Some(v) => match Self::parse(v) {
                Some(m) => (m, None),
                None => (
                    Self::Compact,
                    Some(format!(
                        "oxinfer: warning: unknown {PACKED_VAR}={v:?} (expected \"0\", \"auto\" or \"all\"); using auto"
                    )),
                ),
            },
        }
    }
}

/// The packing mode of this process, read once from `OXINFER_PACKED` (default
/// [`PackingMode::Compact`]; an unknown value prints one warning line to stderr and selects it).
pub fn packing_mode() -> PackingMode {
    static MODE: OnceLock<PackingMode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let (mode, warning) = PackingMode::from_env_value(env_value(PACKED_VAR).as_deref());
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        mode
    })
}

/// Whether weights may be repacked at all: `OXINFER_PACKED` is not `0` (read once). Which
/// formats are packed is [`crate::packed::packing_allowed`]'s rule.
pub fn packing_enabled() -> bool {
    packing_mode() != PackingMode::Off
}

/// Whether kernel variants may be measured at start-up ([`crate::tuning`]): `OXINFER_TUNE` is
/// not `0` (read once).
pub fn tuning_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !switched_off(env_value(TUNE_VAR).as_deref()))
}

/// Whether large weight buffers ask for transparent huge pages ([`crate::huge::HugeBytes`]):
/// `OXINFER_HUGEPAGES` is not `0` (read once).
pub fn huge_pages_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !switched_off(env_value(HUGEPAGES_VAR).as_deref()))
}

/// The variable that, set to `0`, stores Q8_0 / Q4_0 KV rows unrotated
/// ([`kv_rotation_enabled`]).
pub const KV_ROTATION_VAR: &str = "OXINFER_KV_ROTATION";

/// Whether quantized KV rows are rotated before they are rounded
/// ([`crate::attention::kv_rotation`]): `OXINFER_KV_ROTATION` is not `0` (read once).
pub fn kv_rotation_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !switched_off(env_value(KV_ROTATION_VAR).as_deref()))
}

/// Who decided whether the two-group kernels run ([`TwoGroupChoice::source`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceSource {
    /// The CPU lacks AVX-512 VNNI or BW: the kernels cannot run.
    Hardware,
    /// `OXINFER_ZMM` forced it.
    Env,
    /// A measurement on this CPU ([`crate::tuning::measure_two_group`]), possibly cached.
    Measured,
    /// The known-CPU table ([`cpu_table_two_group`]).
    Table,
}

impl ChoiceSource {
    /// Lower-case name for `oxinfer devices` (`"hardware"`, `"env"`, `"measured"`, `"table"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Hardware => "hardware",
            Self::Env => "OXINFER_ZMM",
            Self::Measured => "measured",
            Self::Table => "known-CPU table",
        }
    }
}

/// Whether the 512-bit two-group (16-row) kernels run for Q4_K and for Q6_K products on an
/// [`Isa::Avx512Vnni`] CPU, instead of the 256-bit one-group kernels (same products, different
/// speed: they win on CPUs with full-width AVX-512 units and lose on CPUs that split 512-bit
/// operations in two, such as AMD Zen 4). Decode-sized products (up to [`DECODE_TOKENS`]
/// tokens: bound by memory or by instructions per weight byte) and prefill-sized ones (bound by
/// the integer dot products) are chosen apart: one CPU can favour each variant in one regime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwoGroupChoice {
    /// Products of up to [`DECODE_TOKENS`] tokens.
    pub decode: PerFormat,
    /// Products of more tokens.
    pub prefill: PerFormat,
    /// Who decided.
    pub source: ChoiceSource,
}

/// One flag per format that has two-group kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PerFormat {
    /// Q4_K products take the two-group kernels.
    pub q4k: bool,
    /// Q6_K products take the two-group kernels.
    pub q6k: bool,
}

impl PerFormat {
    /// The same flag for both formats.
    pub fn both(on: bool) -> Self {
        Self { q4k: on, q6k: on }
    }

    /// Whether any format takes the two-group kernels.
    pub fn any(self) -> bool {
        self.q4k || self.q6k
    }
}

/// Products of at most this many tokens count as decode for [`TwoGroupChoice`] (one call of
/// the two-group kernels: a decode step, or a few speculative or batched tokens).
pub const DECODE_TOKENS: usize = 4;

impl TwoGroupChoice {
    fn both(on: bool, source: ChoiceSource) -> Self {
        Self {
            decode: PerFormat::both(on),
            prefill: PerFormat::both(on),
            source,
        }
    }

    /// The flags for a product of `t` tokens.
    pub fn at(&self, t: usize) -> PerFormat {
        if t <= DECODE_TOKENS {
            self.decode
        } else {
            self.prefill
        }
    }
}

static TWO_GROUP: OnceLock<TwoGroupChoice> = OnceLock::new();

/// Whether the CPU can run the two-group kernels at all (an [`Isa::Avx512Vnni`] level with
/// AVX-512 BW).
pub fn two_group_supported() -> bool {
    detected_isa().has_vnni() && cpu_has_avx512bw()
}

/// The choice when nothing was measured: off without the hardware, `OXINFER_ZMM` when set,
/// else the known-CPU table.
fn default_two_group() -> TwoGroupChoice {
    if !two_group_supported() {
        return TwoGroupChoice::both(false, ChoiceSource::Hardware);
    }
    match env_value(ZMM_VAR).as_deref().map(str::trim) {
        Some("0") => TwoGroupChoice::both(false, ChoiceSource::Env),
        Some("1") => TwoGroupChoice::both(true, ChoiceSource::Env),
        _ => TwoGroupChoice::both(cpu_table_two_group(), ChoiceSource::Table),
    }
}

/// The choice when no measurement may change it (no hardware, or `OXINFER_ZMM` set, or a
/// choice already fixed by a product or an install); `None` when a measurement would decide.
pub fn two_group_choice_if_fixed() -> Option<TwoGroupChoice> {
    if let Some(c) = TWO_GROUP.get() {
        return Some(*c);
    }
    let d = default_two_group();
    (d.source != ChoiceSource::Table).then_some(d)
}

/// The two-group choice of this process: the one installed by [`install_measured_two_group`]
/// before the first product, else [`default_two_group`] (fixed at first use).
pub fn two_group_choice() -> TwoGroupChoice {
    *TWO_GROUP.get_or_init(default_two_group)
}

/// Installs a measured choice. It only takes effect when the hardware has the kernels,
/// `OXINFER_ZMM` is unset and no product has run yet; returns the choice in effect.
pub fn install_measured_two_group(decode: PerFormat, prefill: PerFormat) -> TwoGroupChoice {
    *TWO_GROUP.get_or_init(|| {
        let d = default_two_group();
        if d.source == ChoiceSource::Table {
            TwoGroupChoice {
                decode,
                prefill,
                source: ChoiceSource::Measured,
            }
        } else {
            d
        }
    })
}

/// Whether the two-group kernels may run for any format ([`two_group_choice`]).
pub fn zmm_enabled() -> bool {
    let c = two_group_choice();
    c.decode.any() || c.prefill.any()
}

/// The known-CPU table's answer for the two-group kernels: off on AMD family 19h (Zen 3/4,
/// whose AVX-512 executes 512-bit operations as two 256-bit halves; measured 21 % slower decode
/// on Zen 4), on elsewhere (full-width units: Intel Xeon since Skylake-SP, AMD Zen 5).
pub fn cpu_table_two_group() -> bool {
    !matches!(cpu_vendor_family(), Some((Vendor::Amd, 0x19)))
}

/// CPU vendors the known-CPU table tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// `GenuineIntel`.
    Intel,
    /// `AuthenticAMD`.
    Amd,
    /// Anything else.
    Other,
}

/// The CPU's vendor and display family (base family plus extended family, as vendors number
/// them: 0x19 = AMD Zen 3/4, 0x1A = Zen 5, 6 = most Intel cores); `None` off x86-64.
#[cfg(target_arch = "x86_64")]
pub fn cpu_vendor_family() -> Option<(Vendor, u32)> {
    use std::arch::x86_64::__cpuid;
    let v = __cpuid(0);
    let mut name = [0u8; 12];
    name[..4].copy_from_slice(&v.ebx.to_le_bytes());
    name[4..8].copy_from_slice(&v.edx.to_le_bytes());
    name[8..].copy_from_slice(&v.ecx.to_le_bytes());
    let vendor = match &name {
        b"GenuineIntel" => Vendor::Intel,
        b"AuthenticAMD" => Vendor::Amd,
        _ => Vendor::Other,
    };
    let eax = __cpuid(1).eax;
    let base = (eax >> 8) & 0xf;
    let family = if base == 0xf {
        base + ((eax >> 20) & 0xff)
    } else {
        base
    };
    Some((vendor, family))
}

/// The CPU's vendor and family: `None` off x86-64.
#[cfg(not(target_arch = "x86_64"))]
pub fn cpu_vendor_family() -> Option<(Vendor, u32)> {
    None
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
    /// WebAssembly SIMD128 (`std::arch::wasm32`): chosen at build time, since a wasm module
    /// that uses it does not load on an engine without it (`-C target-feature=+simd128`).
    #[non_exhaustive]
    Simd128,
    /// SIMD128 with relaxed SIMD (`i32x4.relaxed_dot_i8x16_i7x16_add_s`: 16 int8 products
    /// summed four by four into i32 lanes in one instruction), chosen at build time like
    /// [`Isa::Simd128`] (`-C target-feature=+simd128,+relaxed-simd`): the int8 kernels that
    /// can put 7-bit weights in the instruction's unsigned operand use it, every other kernel
    /// is SIMD128's.
    #[non_exhaustive]
    RelaxedSimd128,
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
            Isa::Simd128 => "simd128",
            Isa::RelaxedSimd128 => "simd128+relaxed",
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

    /// Whether this is WebAssembly SIMD128 (with or without relaxed SIMD).
    pub fn is_simd128(self) -> bool {
        matches!(self, Isa::Simd128 | Isa::RelaxedSimd128)
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
        #[cfg(all(
            target_arch = "wasm32",
            target_feature = "simd128",
            target_feature = "relaxed-simd"
        ))]
        return Isa::RelaxedSimd128;
        #[cfg(all(
            target_arch = "wasm32",
            target_feature = "simd128",
            not(target_feature = "relaxed-simd")
        ))]
        return Isa::Simd128;
        #[allow(unreachable_code)]
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
    if best.is_simd128() {
        v.push(Isa::Simd128);
    }
    if best == Isa::RelaxedSimd128 {
        v.push(Isa::RelaxedSimd128);
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
    fn packing_mode_values() {
        assert_eq!(PackingMode::parse(" 0\n"), Some(PackingMode::Off));
        assert_eq!(PackingMode::parse("1"), Some(PackingMode::Compact));
        assert_eq!(PackingMode::parse("Auto"), Some(PackingMode::Compact));
        assert_eq!(PackingMode::parse("ALL"), Some(PackingMode::All));
        assert_eq!(PackingMode::parse("yes"), None);
        assert_eq!(
            PackingMode::from_env_value(None),
            (PackingMode::Compact, None)
        );
        let (m, w) = PackingMode::from_env_value(Some("everything"));
        assert_eq!(m, PackingMode::Compact);
        let w = w.unwrap();
        assert!(w.contains("OXINFER_PACKED") && w.contains("\"everything\"") && !w.contains('\n'));
        assert_eq!(packing_enabled(), packing_mode() != PackingMode::Off);
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
        assert!(!zmm_enabled() || two_group_supported());
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
