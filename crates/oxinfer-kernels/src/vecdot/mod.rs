//! Dot products of one packed weight row with one activation row: the decode kernels.
//!
//! Quantized weights meet activations quantized to int8 ([`crate::q8`]): 32-weight formats
//! against [`BlockQ8`], K-quants against [`BlockQ8K`] (each super-block unpacked once to
//! integers, [`KBlock`], then dotted with every token). Float weights meet f32 activations.
//! Each kernel has a scalar twin (`scalar.rs`) that the SIMD versions are tested against.

mod avx2;
mod iq_avx2;
mod iq_neon;
pub(crate) mod neon;
mod neon_mm;
mod scalar;
mod simd128;
mod unpack;

pub use crate::dispatch::{available_isas, detected_isa, Isa};
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
pub(crate) use simd128::f16x4_to_f32 as simd128_f16x4_to_f32;
#[cfg(all(
    target_arch = "wasm32",
    target_feature = "simd128",
    target_feature = "relaxed-simd"
))]
pub(crate) use simd128::relaxed as simd128_relaxed;
pub use unpack::{unpack_k, KBlock};

use crate::format::WeightFormat;
use crate::q8::{BlockQ8, BlockQ8K};

/// Whether [`dot_q8_2x4`] is faster than two [`dot_q8_x4`] calls at `isa` (it has a kernel of
/// its own); callers with two or more rows and four or more tokens then pair the rows.
pub fn pairs_rows(isa: Isa) -> bool {
    isa == Isa::NeonI8mm
}

/// Whether [`dot_q8_rows4`] is faster than four [`dot_q8`] calls at `isa` (it has a kernel of
/// its own); callers with one token and four or more rows then take the rows four at a time.
pub fn groups_rows4(isa: Isa) -> bool {
    isa.is_simd128()
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
        Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8 | Q4 | IQ4_NL | MXFP4 => ActKind::Q8,
        Q2K | Q3K | Q4K | Q5K | Q6K | Q8K => ActKind::Q8K,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M | IQ4_XS | TQ1_0 | TQ2_0 => {
            ActKind::Q8K
        }
    }
}

/// Dot product of a float-format row (`F32`, `F16`, `BF16` bytes) with f32 `x`.
///
/// # Panics
/// If `format` is not a float format or `w` does not hold exactly `x.len()` of its values.
pub fn dot_float(format: WeightFormat, w: &[u8], x: &[f32], isa: Isa) -> f32 {
    check::float_row(format, w, x.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_float(format, w, x) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of every aarch64 CPU (and the Neon* levels are only chosen when
        // the CPU reports it).
        isa if isa.is_neon() => unsafe { neon::dot_float(format, w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            simd128::dot_float(format, w, x).unwrap_or_else(|| scalar::dot_float(format, w, x))
        }
        _ => scalar::dot_float(format, w, x),
    }
}

/// Dot product of a row of a 32-weight format with quantized activations (one block per 32).
///
/// # Panics
/// If `format` is not one of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 or `w` is not
/// `x.len()` blocks.
pub fn dot_q8(format: WeightFormat, w: &[u8], x: &[BlockQ8], isa: Isa) -> f32 {
    check::q8_row(format, w, x.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports avx2, fma and f16c.
        isa if isa.has_avx2() => unsafe { avx2::dot_q8(format, w, x) },
        #[cfg(target_arch = "aarch64")]
        isa if isa.is_neon() => neon_q8_multi::<1>(format, w, None, [x], isa)[0],
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            let mut out = [0f32; 1];
            if simd128::dot_q8_multi::<1>(format, w, [x], &mut out) {
                out[0]
            } else {
                scalar::dot_q8(format, w, x)
            }
        }
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
///
/// # Panics
/// As [`dot_q8`], for each of the four tokens.
pub fn dot_q8_x4(format: WeightFormat, w: &[u8], xs: [&[BlockQ8]; 4], isa: Isa) -> [f32; 4] {
    for x in xs {
        check::q8_row(format, w, x.len());
    }
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
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            let mut out = [0f32; 4];
            if simd128::dot_q8_multi::<4>(format, w, xs, &mut out) {
                out
            } else {
                xs.map(|x| scalar::dot_q8(format, w, x))
            }
        }
        _ => xs.map(|x| scalar::dot_q8(format, w, x)),
    }
}

/// Dot products of two rows of a 32-weight format (of equal length) with four tokens'
/// activations: `out[r][k] = w[r] · xs[k]`. With [`pairs_rows`] it runs a two-row kernel
/// (`smmla` on aarch64 with i8mm); otherwise it is two [`dot_q8_x4`] calls.
///
/// # Panics
/// As [`dot_q8`], for each row and token.
pub fn dot_q8_2x4(
    format: WeightFormat,
    w: [&[u8]; 2],
    xs: [&[BlockQ8]; 4],
    isa: Isa,
) -> [[f32; 4]; 2] {
    for (row, x) in w.iter().flat_map(|row| xs.iter().map(move |x| (row, x))) {
        check::q8_row(format, row, x.len());
    }
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

/// Dot products of four rows of a 32-weight format (of equal length) with one token's
/// activations: `out[r] = w[r] · x`. With [`groups_rows4`] it runs a four-row kernel (the
/// activations widened once for the four rows, one vector of sums per block); otherwise it is
/// four [`dot_q8`] calls.
///
/// # Panics
/// As [`dot_q8`], for each row.
pub fn dot_q8_rows4(format: WeightFormat, w: [&[u8]; 4], x: &[BlockQ8], isa: Isa) -> [f32; 4] {
    for row in w {
        check::q8_row(format, row, x.len());
    }
    match isa {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            let mut out = [0f32; 4];
            if simd128::dot_q8_rows4(format, w, x, isa, &mut out) {
                out
            } else {
                w.map(|row| scalar::dot_q8(format, row, x))
            }
        }
        _ => w.map(|row| dot_q8(format, row, x, isa)),
    }
}

/// Dot product of a row of a split format (`Q8`, `Q4`: quants `w`, per-block scales `s`) with
/// quantized activations (one block per 32).
///
/// # Panics
/// If `format` is not a split format or `w` / `s` are not `x.len()` blocks of quants / scales.
pub fn dot_split(format: WeightFormat, w: &[u8], s: &[u8], x: &[BlockQ8], isa: Isa) -> f32 {
    check::split_row(format, w, s, x.len());
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
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            let mut out = [0f32; 1];
            simd128::dot_split_multi::<1>(format, w, s, [x], &mut out);
            out[0]
        }
        _ => scalar::dot_split(format, w, s, x),
    }
}

/// [`dot_split`] for four tokens at once (each weight block unpacked once for the four).
///
/// # Panics
/// As [`dot_split`], for each of the four tokens.
pub fn dot_split_x4(
    format: WeightFormat,
    w: &[u8],
    s: &[u8],
    xs: [&[BlockQ8]; 4],
    isa: Isa,
) -> [f32; 4] {
    for x in xs {
        check::split_row(format, w, s, x.len());
    }
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
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => {
            let mut out = [0f32; 4];
            simd128::dot_split_multi::<4>(format, w, s, xs, &mut out);
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
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of every aarch64 CPU.
        Isa::Neon => unsafe { neon::dot_kblock(kb, y) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: Isa::NeonDot and Isa::NeonI8mm are only chosen when the CPU reports dotprod.
        Isa::NeonDot | Isa::NeonI8mm => unsafe { neon::dot_kblock_dot(kb, y) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 | Isa::RelaxedSimd128 => simd128::dot_kblock(kb, y),
        _ => scalar::dot_kblock(kb, y),
    }
}

/// Dot product of a Q8_K row (activation-style blocks used as weights) with [`BlockQ8K`]s.
pub fn dot_q8k_row(w: &[u8], x: &[BlockQ8K]) -> f32 {
    scalar::dot_q8k_row(w, x)
}

/// Unpacks one super-block `b` of a K-quant `format` (not Q8_K) into `out`, with SIMD for the
/// quants where `isa` has it.
///
/// # Panics
/// If `format` is Q8_K or not a K-quant, or `b` is not one whole super-block of it.
pub fn unpack_k_isa(format: WeightFormat, b: &[u8], out: &mut KBlock, isa: Isa) {
    check::k_block(format, b);
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU reports avx2, fma and f16c;
        // `b` is one whole super-block of `format` (checked above).
        if unsafe { avx2::unpack_quants(format, b, &mut out.q) } {
            unpack::unpack_scales(format, b, out);
            return;
        }
        // SAFETY: as above.
        if unsafe { iq_avx2::unpack_iq(format, b, out) } {
            return;
        }
    }
    #[cfg(target_arch = "aarch64")]
    if isa.is_neon() {
        // SAFETY: NEON is part of every aarch64 CPU; `b` is one whole super-block of `format`
        // (checked above).
        if unsafe { neon::unpack_quants(format, b, &mut out.q) } {
            unpack::unpack_scales(format, b, out);
            return;
        }
        // SAFETY: as above.
        if unsafe { iq_neon::unpack_iq(format, b, out) } {
            return;
        }
    }
    let _ = isa;
    unpack_k(format, b, out);
}

/// The length checks of the safe entry points: the SIMD kernels read as many weight bytes as
/// the activations say, so a short row must stop here, with a message, before any load.
mod check {
    use crate::format::WeightFormat;

    /// `w` holds `n` values of the float format `format`.
    pub(super) fn float_row(format: WeightFormat, w: &[u8], n: usize) {
        use WeightFormat::*;
        assert!(
            matches!(format, F32 | F16 | BF16),
            "dot_float takes F32, F16 or BF16 weights, not {format}"
        );
        blocks(format, "weight", w.len(), format.block_bytes(), n);
    }

    /// `w` is `n` blocks of the 32-weight format `format`.
    pub(super) fn q8_row(format: WeightFormat, w: &[u8], n: usize) {
        use WeightFormat::*;
        assert!(
            matches!(format, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | IQ4_NL | MXFP4),
            "dot_q8 takes Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL or MXFP4 weights, not {format}"
        );
        blocks(format, "weight", w.len(), format.block_bytes(), n);
    }

    /// `w` and `s` are the quants and scales of `n` blocks of the split format `format`.
    pub(super) fn split_row(format: WeightFormat, w: &[u8], s: &[u8], n: usize) {
        assert!(
            format.is_split(),
            "dot_split takes Q8 or Q4 weights, not {format}"
        );
        blocks(format, "quant", w.len(), format.block_bytes(), n);
        blocks(format, "scale", s.len(), format.scale_bytes(), n);
    }

    /// `b` is one super-block of a K-quant or 256-weight IQ/TQ type that unpacks to a
    /// [`super::KBlock`].
    pub(super) fn k_block(format: WeightFormat, b: &[u8]) {
        use WeightFormat::*;
        assert!(
            matches!(format, Q2K | Q3K | Q4K | Q5K | Q6K)
                || (WeightFormat::IQ.contains(&format) && format.block_size() == 256),
            "unpack_k takes Q2_K, Q3_K, Q4_K, Q5_K, Q6_K or 256-weight IQ/TQ blocks, not {format}"
        );
        blocks(format, "super-block", b.len(), format.block_bytes(), 1);
    }

    /// `len` bytes are exactly `n` blocks of `per` bytes.
    fn blocks(format: WeightFormat, what: &str, len: usize, per: usize, n: usize) {
        assert!(
            n.checked_mul(per) == Some(len),
            "{format} {what} bytes: {len} given, {n} blocks of {per} bytes expected"
        );
    }
}

#[cfg(test)]
mod iq_tests;
#[cfg(test)]
pub(crate) mod tests;
