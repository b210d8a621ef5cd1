//! Dot products of one packed weight row with one activation row: the decode kernels.
//!
//! Quantized weights meet activations quantized to int8 ([`crate::q8`]): 32-weight formats
//! against [`BlockQ8`], K-quants against [`BlockQ8K`] (each super-block unpacked once to
//! integers, [`KBlock`], then dotted with every token). Float weights meet f32 activations.
//! Each kernel has a scalar twin (`scalar.rs`) that the SIMD versions are tested against.

mod avx2;
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
}

impl Isa {
    /// Name for `oxinfer devices` and bench output.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2+fma+f16c",
        }
    }

    /// Whether this set includes AVX2, FMA and F16C (every x86 SIMD set we have does; an
    /// AVX-512 VNNI variant of the 32-weight dots was measured slower than AVX2 on a Xeon with
    /// AVX-512, 25-33 vs 29-32 GFLOP/s per core, and dropped).
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2)
    }
}

/// Every instruction set the running CPU supports, scalar first (for tests and benches).
pub fn available_isas() -> Vec<Isa> {
    let mut v = vec![Isa::Scalar];
    let best = detected_isa();
    if best.has_avx2() {
        v.push(Isa::Avx2);
    }
    v
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
                return Isa::Avx2;
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
        _ => scalar::dot_float(format, w, x),
    }
}

/// Dot product of a row of a 32-weight format with quantized activations (one block per 32).
pub fn dot_q8(format: WeightFormat, w: &[u8], x: &[BlockQ8], isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_q8(format, w, x) },
        _ => scalar::dot_q8(format, w, x),
    }
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
        _ => xs.map(|x| scalar::dot_q8(format, w, x)),
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
        _ => xs.map(|x| scalar::dot_split(format, w, s, x)),
    }
}

/// Dot product of an unpacked K-quant super-block with one [`BlockQ8K`].
pub fn dot_kblock(kb: &KBlock, y: &BlockQ8K, isa: Isa) -> f32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_kblock(kb, y) },
        _ => scalar::dot_kblock(kb, y),
    }
}

/// Dot product of a Q8_K row (activation-style blocks used as weights) with [`BlockQ8K`]s.
pub fn dot_q8k_row(w: &[u8], x: &[BlockQ8K]) -> f32 {
    scalar::dot_q8k_row(w, x)
}

#[cfg(test)]
mod tests;
