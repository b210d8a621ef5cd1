//! Valid blocks of every GGML block format for the device tests: random quants (any bytes are
//! valid codes in every format) with the scale fields set to chosen finite values.

use half::f16;
use oxinfer_kernels::WeightFormat;

/// Writes the scale fields of block `blk` in format `f`: the block scale `d` (as f16, f32 for
/// Q8_K, the nearest power of two for MXFP4's E8M0 byte) and, for the formats with a second
/// f16 field (a min), `m`. The other bytes are left as they are.
///
/// # Panics
/// On a float or split format.
pub fn set_scales(f: WeightFormat, blk: &mut [u8], d: f32, m: f32) {
    use WeightFormat::*;
    let put16 = |b: &mut [u8], at: usize, v: f32| {
        b[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
    };
    match f {
        Q4_0 | Q5_0 | Q8_0 | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S | IQ4_NL | IQ3_S | IQ2_S
        | IQ4_XS => put16(blk, 0, d),
        Q4_1 | Q5_1 | Q4K | Q5K => {
            put16(blk, 0, d);
            put16(blk, 2, m);
        }
        Q2K => {
            put16(blk, 80, d);
            put16(blk, 82, m);
        }
        Q3K => put16(blk, 108, d),
        Q6K => put16(blk, 208, d),
        Q8K => blk[..4].copy_from_slice(&d.to_le_bytes()),
        TQ1_0 => put16(blk, 52, d),
        TQ2_0 => put16(blk, 64, d),
        // The f16 scale's four nibbles are the top nibbles of the four u16 scale words.
        IQ1_M => {
            let h = f16::from_f32(d).to_bits();
            for k in 0..4 {
                let at = 48 + 2 * k;
                let low = u16::from_le_bytes([blk[at], blk[at + 1]]) & 0x0FFF;
                let v = low | ((h >> (4 * k)) & 15) << 12;
                blk[at..at + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
        // E8M0 byte e scales by 2^(e - 128) (the halved scale of doubled values).
        MXFP4 => blk[0] = (128.0 + d.abs().max(1e-30).log2().round()).clamp(0.0, 254.0) as u8,
        other => panic!("{other} has no block scales"),
    }
}
