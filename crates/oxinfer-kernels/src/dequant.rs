//! Scalar reference dequantization: packed weights → f32.
//!
//! These are the reference implementations every SIMD/GPU kernel is tested against. They
//! reproduce llama.cpp's `dequantize_row_*` (ggml-quants.c) bit for bit: same operations, same
//! order, no fused multiply-add.

mod float;
pub(crate) mod iq;
#[rustfmt::skip]
pub(crate) mod iq_grids;
pub(crate) mod iq_layout;
pub(crate) mod kquants;
mod legacy;
mod split;

pub(crate) use float::f16_at;
pub(crate) use iq_grids::{KVALUES_IQ4NL, KVALUES_MXFP4};

/// The lookup tables of the IQ and MXFP4 formats (grid entries pack one value per byte, byte
/// `j` little endian = weight `j`), read-only, for backends that build their own copy of them
/// (oxinfer-cuda generates its `kernels/iq_grids.cuh` from these).
#[allow(missing_docs)] // each field is the table of the same name in `iq_grids`
pub struct IqTables {
    pub ksigns_iq2xs: &'static [u8; 128],
    pub iq2xxs_grid: &'static [u64; 256],
    pub iq2xs_grid: &'static [u64; 512],
    pub iq2s_grid: &'static [u64; 1024],
    pub iq1s_grid: &'static [u64; 2048],
    pub iq3xxs_grid: &'static [u32; 256],
    pub iq3s_grid: &'static [u32; 512],
    pub kvalues_iq4nl: &'static [i8; 16],
    pub kvalues_mxfp4: &'static [i8; 16],
}

/// The tables the CPU dequantizer uses ([`IqTables`]).
pub static IQ_TABLES: IqTables = IqTables {
    ksigns_iq2xs: &iq_grids::KSIGNS_IQ2XS,
    iq2xxs_grid: &iq_grids::IQ2XXS_GRID,
    iq2xs_grid: &iq_grids::IQ2XS_GRID,
    iq2s_grid: &iq_grids::IQ2S_GRID,
    iq1s_grid: &iq_grids::IQ1S_GRID,
    iq3xxs_grid: &iq_grids::IQ3XXS_GRID,
    iq3s_grid: &iq_grids::IQ3S_GRID,
    kvalues_iq4nl: &iq_grids::KVALUES_IQ4NL,
    kvalues_mxfp4: &iq_grids::KVALUES_MXFP4,
};

use crate::error::KernelError;
use crate::format::WeightFormat;

/// Dequantizes one row of `dst.len()` weights stored in `format` into `dst` (f32).
///
/// `src` holds the row's whole blocks back to back (llama.cpp layout, little endian); its length
/// must be exactly `format.row_bytes(dst.len())`.
///
/// # Errors
/// [`KernelError::NotBlockMultiple`] when `dst.len()` is not a multiple of the block size,
/// [`KernelError::RowBytes`] when `src` has the wrong length.
pub fn dequantize_row(
    format: WeightFormat,
    src: &[u8],
    dst: &mut [f32],
) -> Result<(), KernelError> {
    let n = dst.len();
    let expected = format.row_bytes(n).ok_or_else(|| {
        if !n.is_multiple_of(format.block_size()) {
            KernelError::NotBlockMultiple {
                format,
                n,
                block_size: format.block_size(),
            }
        } else {
            KernelError::Overflow {
                format,
                what: format!("a row of {n} weights"),
            }
        }
    })?;
    if src.len() != expected {
        return Err(KernelError::RowBytes {
            format,
            n,
            expected,
            actual: src.len(),
        });
    }
    match format {
        WeightFormat::F32 => float::dequantize_f32(src, dst),
        WeightFormat::F16 => float::dequantize_f16(src, dst),
        WeightFormat::BF16 => float::dequantize_bf16(src, dst),
        WeightFormat::Q4_0 => blocks(src, dst, legacy::block_q4_0),
        WeightFormat::Q4_1 => blocks(src, dst, legacy::block_q4_1),
        WeightFormat::Q5_0 => blocks(src, dst, legacy::block_q5_0),
        WeightFormat::Q5_1 => blocks(src, dst, legacy::block_q5_1),
        WeightFormat::Q8_0 => blocks(src, dst, legacy::block_q8_0),
        WeightFormat::Q2K => blocks(src, dst, kquants::block_q2_k),
        WeightFormat::Q3K => blocks(src, dst, kquants::block_q3_k),
        WeightFormat::Q4K => blocks(src, dst, kquants::block_q4_k),
        WeightFormat::Q5K => blocks(src, dst, kquants::block_q5_k),
        WeightFormat::Q6K => blocks(src, dst, kquants::block_q6_k),
        WeightFormat::Q8K => blocks(src, dst, kquants::block_q8_k),
        WeightFormat::IQ4_NL => blocks(src, dst, iq::block_iq4_nl),
        WeightFormat::MXFP4 => blocks(src, dst, iq::block_mxfp4),
        WeightFormat::IQ2_XXS
        | WeightFormat::IQ2_XS
        | WeightFormat::IQ2_S
        | WeightFormat::IQ3_XXS
        | WeightFormat::IQ3_S
        | WeightFormat::IQ1_S
        | WeightFormat::IQ1_M
        | WeightFormat::IQ4_XS
        | WeightFormat::TQ1_0
        | WeightFormat::TQ2_0 => {
            let bb = format.block_bytes();
            for (b, y) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(256)) {
                let Ok(y) = <&mut [f32; 256]>::try_from(y) else {
                    unreachable!("chunks_exact yields exact sizes")
                };
                iq::dequantize(format, b, y);
            }
        }
        WeightFormat::Q8 | WeightFormat::Q4 => {
            return Err(KernelError::Scales {
                format,
                what: "a split format needs its scales buffer (use dequantize_row_split)".into(),
            })
        }
    }
    Ok(())
}

/// Dequantizes one row of `dst.len()` weights whose scales may live in a separate buffer: for
/// the split formats (`Q8`, `Q4`) `qs` holds the row's quants and `scales` its per-block scales
/// (`format.row_scale_bytes(n)` bytes); for every other format `scales` must be empty and this
/// is [`dequantize_row`].
///
/// # Errors
/// As [`dequantize_row`], plus [`KernelError::Scales`] when `scales` has the wrong length.
pub fn dequantize_row_split(
    format: WeightFormat,
    qs: &[u8],
    scales: &[u8],
    dst: &mut [f32],
) -> Result<(), KernelError> {
    let n = dst.len();
    if !format.is_split() {
        if !scales.is_empty() {
            return Err(KernelError::Scales {
                format,
                what: "this format keeps its scales in its blocks, but a scales buffer was given"
                    .into(),
            });
        }
        return dequantize_row(format, qs, dst);
    }
    let bs = format.block_size();
    let (Some(expected), Some(want)) = (format.row_bytes(n), format.row_scale_bytes(n)) else {
        return Err(KernelError::NotBlockMultiple {
            format,
            n,
            block_size: bs,
        });
    };
    if scales.len() != want {
        return Err(KernelError::Scales {
            format,
            what: format!(
                "a row of {n} weights takes {want} scale bytes, but {} were given",
                scales.len()
            ),
        });
    }
    if qs.len() != expected {
        return Err(KernelError::RowBytes {
            format,
            n,
            expected,
            actual: qs.len(),
        });
    }
    match format {
        WeightFormat::Q8 => split::dequantize_q8(qs, scales, dst),
        _ => split::dequantize_q4(qs, scales, dst),
    }
    Ok(())
}

/// Applies a block decoder to every `(B bytes → N weights)` block of a row whose sizes were
/// already checked.
fn blocks<const B: usize, const N: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: fn(&[u8; B], &mut [f32; N]),
) {
    debug_assert_eq!(src.len() / B * N, dst.len());
    for (b, y) in src.chunks_exact(B).zip(dst.chunks_exact_mut(N)) {
        // chunks_exact yields slices of exactly B / N elements, so these conversions cannot fail.
        let (Ok(b), Ok(y)) = (<&[u8; B]>::try_from(b), <&mut [f32; N]>::try_from(y)) else {
            unreachable!("chunks_exact yields exact sizes")
        };
        f(b, y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_sizes() {
        let mut dst = vec![0.0; 33];
        let e = dequantize_row(WeightFormat::Q4_0, &[0; 36], &mut dst).unwrap_err();
        assert!(
            matches!(
                e,
                KernelError::NotBlockMultiple {
                    n: 33,
                    block_size: 32,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("Q4_0"), "{e}");
        let mut dst = vec![0.0; 64];
        let e = dequantize_row(WeightFormat::Q4_0, &[0; 35], &mut dst).unwrap_err();
        assert_eq!(
            e,
            KernelError::RowBytes {
                format: WeightFormat::Q4_0,
                n: 64,
                expected: 36,
                actual: 35
            }
        );
        assert_eq!(
            e.to_string(),
            "Q4_0: a row of 64 weights takes 36 bytes, but 35 bytes were given"
        );
        // empty rows are fine
        dequantize_row(WeightFormat::Q6K, &[], &mut []).unwrap();
    }

    #[test]
    fn all_formats_all_sizes_never_panic() {
        for f in WeightFormat::ALL {
            for n in [0, 1, 31, 32, 256, 257, 512] {
                let mut dst = vec![0.0; n];
                for len in [0, 1, f.block_bytes(), f.row_bytes(n).unwrap_or(7)] {
                    let src = vec![0x5au8; len];
                    let r = dequantize_row(f, &src, &mut dst);
                    assert_eq!(
                        r.is_ok(),
                        f.row_bytes(n) == Some(len),
                        "{f} n={n} len={len}"
                    );
                }
            }
        }
    }

    #[test]
    fn q4_0_hand_example() {
        // d = 0.5; qs[j] = low nibble j%16, high nibble 15 - j%16
        let mut b = vec![0u8; 18];
        b[..2].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
        for j in 0..16 {
            b[2 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut y = [0.0f32; 32];
        dequantize_row(WeightFormat::Q4_0, &b, &mut y).unwrap();
        for j in 0..16 {
            assert_eq!(y[j], 0.5 * (j as f32 - 8.0));
            assert_eq!(y[j + 16], 0.5 * (15.0 - j as f32 - 8.0));
        }
    }
}
