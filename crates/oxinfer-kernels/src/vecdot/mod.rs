//! Dot products of one packed weight row with one activation row: the decode kernels.
//!
//! Quantized weights meet activations quantized to int8 ([`crate::q8`]): 32-weight formats
//! against [`BlockQ8`], K-quants against [`BlockQ8K`] (each super-block unpacked once to
//! integers, [`KBlock`], then dotted with every token). Float weights meet f32 activations.
//! Each kernel has a scalar twin (`scalar.rs`) that the SIMD versions are tested against.

mod avx2;
mod neon;
mod neon_mm;
mod scalar;
mod unpack;

pub use unpack::{unpack_k, unpack_k_isa, KBlock};

use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};
use std::sync::OnceLock;

/// Which instruction set the fast kernels use on this CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Portable code only.
    Scalar,
    /// AVX2 + FMA + F16C.
    Avx2,
    /// AVX2 + FMA + F16C plus AVX-512 F/VL and VNNI: the packed GEMM/GEMV use `vpdpbusd` on
    /// 256-bit registers; everything else runs the AVX2 kernels.
    Avx512Vnni,
    /// aarch64 Advanced SIMD (NEON), present on every aarch64 CPU.
    Neon,
    /// NEON with the dot-product extension (`sdot`, Armv8.2 `dotprod`).
    NeonDot,
    /// NEON with `dotprod` and the int8 matrix multiply (`smmla`, Armv8.6 `i8mm`).
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

/// Environment variable that, set to `0`, keeps an AVX-512 VNNI CPU on the AVX2 kernels
/// (A/B measurements).
pub const VNNI_ENV_VAR: &str = "OXINFER_VNNI";

/// Every instruction set the running CPU supports, scalar first (for tests and benches).
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

/// Whether [`dot_q8_2x4`] is faster than two [`dot_q8_x4`] calls at `isa` (it has a kernel of
/// its own); callers with two or more rows and four or more tokens then pair the rows.
pub fn pairs_rows(isa: Isa) -> bool {
    isa == Isa::NeonI8mm
}

/// The best instruction set the running CPU supports (detected once).
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
                    && !std::env::var(VNNI_ENV_VAR).is_ok_and(|v| v.trim() == "0")
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

/// The activation format a weight format's kernels take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActKind {
    /// f32 activations (float weights).
    F32,
    /// [`BlockQ8`] (32-weight formats).
    Q8,
    /// [`BlockQ8K`] (K-quants).
    Q8K,
}

/// The activation format `format`'s kernels take.
pub fn act_kind(format: WeightFormat) -> ActKind {
    use WeightFormat::*;
    match format {
        F32 | F16 | BF16 => ActKind::F32,
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8 | Q4 => ActKind::Q8,
        Q2K | Q3K | Q4K | Q5K | Q6K | Q8K => ActKind::Q8K,
    }
}

/// Dot product of a float-format row (`F32`, `F16`, `BF16` bytes) with f32 `x`.
pub fn dot_float(format: WeightFormat, w: &[u8], x: &[f32], isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_float(format, w, x) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of every aarch64 CPU (and the Neon* levels are only chosen when
        // the CPU reports it).
        isa if isa.is_neon() => unsafe { neon::dot_float(format, w, x) },
        _ => scalar::dot_float(format, w, x),
    }
}

/// Dot product of a row of a 32-weight format with quantized activations (one block per 32).
pub fn dot_q8(format: WeightFormat, w: &[u8], x: &[BlockQ8], isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_q8(format, w, x) },
        #[cfg(target_arch = "aarch64")]
        isa if isa.is_neon() => neon_q8_multi::<1>(format, w, None, [x], isa)[0],
        _ => scalar::dot_q8(format, w, x),
    }
}

/// The NEON 32-weight kernels for `N` tokens: `s` holds the scales of a split format.
#[cfg(target_arch = "aarch64")]
fn neon_q8_multi<const N: usize>(
    format: WeightFormat,
    w: &[u8],
    s: Option<&[u8]>,
    xs: [&[BlockQ8]; N],
    isa: Isa,
) -> [f32; N] {
    let mut out = [0f32; N];
    match (s, isa) {
        // SAFETY: NEON is part of every aarch64 CPU.
        (None, Isa::Neon) => unsafe { neon::dot_q8_multi::<N>(format, w, xs, &mut out) },
        // SAFETY: as above.
        (Some(s), Isa::Neon) => unsafe { neon::dot_split_multi::<N>(format, w, s, xs, &mut out) },
        // SAFETY: Isa::NeonDot and Isa::NeonI8mm are only chosen when the CPU reports dotprod.
        (None, _) => unsafe { neon::dot_q8_multi_dot::<N>(format, w, xs, &mut out) },
        // SAFETY: as above.
        (Some(s), _) => unsafe { neon::dot_split_multi_dot::<N>(format, w, s, xs, &mut out) },
    }
    out
}

/// Dot products of one row of a 32-weight format with four tokens' activations at once (the
/// weight blocks are unpacked once for the four).
pub fn dot_q8_x4(format: WeightFormat, w: &[u8], xs: [&[BlockQ8]; 4], isa: Isa) -> [f32; 4] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        isa if isa.has_avx2() => {
            let mut out = [0f32; 4];
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
            unsafe { avx2::dot_q8_multi::<4>(format, w, xs, &mut out) };
            out
        }
        #[cfg(target_arch = "aarch64")]
        isa if isa.is_neon() => neon_q8_multi::<4>(format, w, None, xs, isa),
        _ => xs.map(|x| scalar::dot_q8(format, w, x)),
    }
}

/// Dot products of two rows of a 32-weight format (of equal length) with four tokens'
/// activations: `out[r][k] = w[r] · xs[k]`. With [`pairs_rows`] it runs a two-row kernel
/// (`smmla` on aarch64 with i8mm); otherwise it is two [`dot_q8_x4`] calls.
pub fn dot_q8_2x4(
    format: WeightFormat,
    w: [&[u8]; 2],
    xs: [&[BlockQ8]; 4],
    isa: Isa,
) -> [[f32; 4]; 2] {
    match isa {
        #[cfg(target_arch = "aarch64")]
        Isa::NeonI8mm => {
            let mut out = [[0f32; 4]; 2];
            // SAFETY: Isa::NeonI8mm is only chosen when the CPU reports dotprod and i8mm.
            unsafe { neon_mm::dot_q8_2x4(format, w, xs, &mut out) };
            out
        }
        _ => w.map(|row| dot_q8_x4(format, row, xs, isa)),
    }
}

/// Dot product of a row of a split format (`Q8`, `Q4`: quants `w`, per-block scales `s`) with
/// quantized activations (one block per 32).
pub fn dot_split(format: WeightFormat, w: &[u8], s: &[u8], x: &[BlockQ8], isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        isa if isa.has_avx2() => {
            let mut out = [0f32; 1];
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
            unsafe { avx2::dot_split_multi::<1>(format, w, s, [x], &mut out) };
            out[0]
        }
        #[cfg(target_arch = "aarch64")]
        isa if isa.is_neon() => neon_q8_multi::<1>(format, w, Some(s), [x], isa)[0],
        _ => scalar::dot_split(format, w, s, x),
    }
}

/// [`dot_split`] for four tokens at once (each weight block unpacked once for the four).
pub fn dot_split_x4(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; 4],
    isa: Isa,
) -> [f32; 4] {
    match isa {
        #[cfg(target_arch = "x86_64")]
        isa if isa.has_avx2() => {
            let mut out = [0f32; 4];
            // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
            unsafe { avx2::dot_split_multi::<4>(format, w, s, xs, &mut out) };
            out
        }
        #[cfg(target_arch = "aarch64")]
        isa if isa.is_neon() => neon_q8_multi::<4>(format, w, Some(s), xs, isa),
        _ => xs.map(|x| scalar::dot_split(format, w, s, x)),
    }
}

/// Dot product of an unpacked K-quant super-block with one [`BlockQ8K`].
pub fn dot_kblock(kb: &KBlock, y: &BlockQ8K, isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_kblock(kb, y) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of every aarch64 CPU.
        Isa::Neon => unsafe { neon::dot_kblock(kb, y) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Isa::NeonDot and Isa::NeonI8mm are only chosen when the CPU reports dotprod.
        Isa::NeonDot | Isa::NeonI8mm => unsafe { neon::dot_kblock_dot(kb, y) },
        _ => scalar::dot_kblock(kb, y),
    }
}

/// Dot product of a Q8_K row (activation-style blocks used as weights) with [`BlockQ8K`]s.
pub fn dot_q8k_row(w: &[u8], x: &[BlockQ8K]) -> f32 {
    scalar::dot_q8k_row(w, x)
}

#[cfg(test)]
mod tests;
