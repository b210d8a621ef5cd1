//! Synthetic weights for measurements: a matrix of random quants whose f16 scales are small
//! finite numbers, so no kernel meets NaN or Inf. Used where only the speed of a product matters
//! (kernel choice at start-up, benches, examples), never as a reference.

use crate::WeightFormat;

/// Byte offsets of the f16 scale fields (`d`, and `dmin`/`m` where the format has one) inside
/// one block of `format`; empty for float formats and for formats whose scales are not a plain
/// f16 (Q8_K's f32 `d`, the split formats, the IQ/TQ/MXFP4 types).
pub fn f16_scale_offsets(format: WeightFormat) -> &'static [usize] {
    match format {
        WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => &[0],
        WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => &[0, 2],
        WeightFormat::Q2K => &[80, 82],
        WeightFormat::Q3K => &[108],
        WeightFormat::Q6K => &[208],
        _ => &[],
    }
}

/// Whether [`random_matrix`] makes usable weights of `format`: the float formats and the
/// formats whose scales are plain f16 fields ([`f16_scale_offsets`]).
pub fn supports(format: WeightFormat) -> bool {
    !format.is_quantized() || !f16_scale_offsets(format).is_empty()
}

/// `rows × cols` weights of `format` (`cols` a multiple of its block size): bytes from a
/// xorshift sequence started at `seed`, every f16 scale field ([`f16_scale_offsets`]) set to
/// 0.01, and float formats' values in `[-0.5, 0.5)`. `None` when `cols` does not fit the
/// block size.
pub fn random_matrix(format: WeightFormat, rows: usize, cols: usize, seed: u64) -> Option<Vec<u8>> {
    let rb = format.row_bytes(cols)?;
    let mut s = seed | 1;
    let mut data: Vec<u8> = (0..rb * rows)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    let unit = |b: u8| f32::from(b) / 256.0 - 0.5;
    match format {
        WeightFormat::F32 => {
            for c in data.chunks_exact_mut(4) {
                c.copy_from_slice(&unit(c[0]).to_le_bytes());
            }
        }
        WeightFormat::F16 => {
            for c in data.chunks_exact_mut(2) {
                c.copy_from_slice(&half::f16::from_f32(unit(c[0])).to_le_bytes());
            }
        }
        WeightFormat::BF16 => {
            for c in data.chunks_exact_mut(2) {
                c.copy_from_slice(&half::bf16::from_f32(unit(c[0])).to_le_bytes());
            }
        }
        _ => {
            let small = half::f16::from_f32(0.01).to_le_bytes();
            let offsets = f16_scale_offsets(format);
            for blk in data.chunks_exact_mut(format.block_bytes()) {
                for &o in offsets {
                    blk[o..o + 2].copy_from_slice(&small);
                }
            }
        }
    }
    Some(data)
}

/// `n` values in `[-amp, amp)` from a xorshift sequence started at `seed`: activations for
/// timing examples (any values time the same).
pub fn random_values(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            amp * ((s >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dequantize_row, WeightMatrix};

    /// Every value decodes finite, for every format with f16 scales and the float formats.
    #[test]
    fn decodes_finite() {
        for format in WeightFormat::ALL {
            if f16_scale_offsets(format).is_empty()
                && !matches!(
                    format,
                    WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
                )
            {
                continue;
            }
            let cols = 256;
            let data = random_matrix(format, 3, cols, 7).unwrap();
            let w = WeightMatrix::new(format, &data, 3, cols).unwrap();
            let mut row = vec![0f32; cols];
            for r in 0..3 {
                let rb = w.data.len() / 3;
                dequantize_row(format, &data[r * rb..(r + 1) * rb], &mut row).unwrap();
                assert!(row.iter().all(|v| v.is_finite()), "{format}");
            }
        }
        assert!(random_matrix(WeightFormat::Q4K, 1, 100, 1).is_none());
    }
}
