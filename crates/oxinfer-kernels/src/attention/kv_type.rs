//! Storage types of a KV cache (llama.cpp's `--cache-type-k` / `--cache-type-v` spellings):
//! f32, f16, bf16, and the 32-value blocks Q8_0 and Q4_0 laid out exactly as GGUF's (an f16
//! scale, then 32 int8 quants or 16 bytes of 4-bit quants; `x = d · q` resp. `d · (q − 8)`).
//!
//! A cached row (one position: `n_kv_heads * head_dim` values) is quantized as it is written,
//! along the row; a row whose width is not a multiple of 32 is padded with zeros to whole
//! blocks. The quantizers here are llama.cpp's reference ones (`quantize_row_q8_0_ref`,
//! `quantize_row_q4_0_ref`, `GGML_FP32_TO_FP16`, `GGML_FP32_TO_BF16`); reading back uses the
//! dequantizers of [`crate::dequant`] (scalar) and their SIMD twins ([`super::kv_dequant`]).

use crate::format::WeightFormat;

/// Element type of cached keys or values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvType {
    /// 4 bytes per value (oxinfer's default).
    #[default]
    F32,
    /// IEEE half: 2 bytes per value.
    F16,
    /// bfloat16: 2 bytes per value.
    Bf16,
    /// Blocks of 32 int8 quants and an f16 scale: 34 bytes per 32 values.
    Q8_0,
    /// Blocks of 32 4-bit quants and an f16 scale: 18 bytes per 32 values.
    Q4_0,
}

/// Values per block of the quantized types.
pub const KV_BLOCK: usize = 32;

impl KvType {
    /// Every type, in the order the CLI lists them.
    pub const ALL: [KvType; 5] = [
        KvType::F32,
        KvType::F16,
        KvType::Bf16,
        KvType::Q8_0,
        KvType::Q4_0,
    ];

    /// llama.cpp's spelling (`f32`, `f16`, `bf16`, `q8_0`, `q4_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvType::F32 => "f32",
            KvType::F16 => "f16",
            KvType::Bf16 => "bf16",
            KvType::Q8_0 => "q8_0",
            KvType::Q4_0 => "q4_0",
        }
    }

    /// The type spelled `s` (case-insensitive), if any.
    pub fn parse(s: &str) -> Option<KvType> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(s.trim()))
    }

    /// The weight format with the same byte layout (its dequantizer is the scalar reference).
    pub fn format(self) -> WeightFormat {
        match self {
            KvType::F32 => WeightFormat::F32,
            KvType::F16 => WeightFormat::F16,
            KvType::Bf16 => WeightFormat::BF16,
            KvType::Q8_0 => WeightFormat::Q8_0,
            KvType::Q4_0 => WeightFormat::Q4_0,
        }
    }

    /// Values per block (1 for the float types, [`KV_BLOCK`] for the quantized ones).
    pub fn block(self) -> usize {
        self.format().block_size()
    }

    /// Whether the type is a block-quantized one.
    pub fn is_quantized(self) -> bool {
        self.block() > 1
    }

    /// Values a stored row of `width` values takes (`width` rounded up to whole blocks).
    pub fn padded(self, width: usize) -> usize {
        width.div_ceil(self.block()) * self.block()
    }

    /// Bytes one row of `width` values takes.
    pub fn row_bytes(self, width: usize) -> usize {
        self.padded(width) / self.block() * self.format().block_bytes()
    }

    /// Appends `x` (one row, any length) to `out` in this type, zero-padded to whole blocks.
    pub fn quantize_row(self, x: &[f32], out: &mut Vec<u8>) {
        match self {
            KvType::F32 => out.extend(x.iter().flat_map(|v| v.to_le_bytes())),
            KvType::F16 => out.extend(x.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes())),
            KvType::Bf16 => out.extend(x.iter().flat_map(|&v| bf16_bits(v).to_le_bytes())),
            KvType::Q8_0 | KvType::Q4_0 => {
                for chunk in x.chunks(KV_BLOCK) {
                    let mut b = [0f32; KV_BLOCK];
                    b[..chunk.len()].copy_from_slice(chunk);
                    if self == KvType::Q8_0 {
                        q8_0_block(&b, out);
                    } else {
                        q4_0_block(&b, out);
                    }
                }
            }
        }
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        KvType::parse(s).ok_or_else(|| {
            let names: Vec<&str> = KvType::ALL.iter().map(|t| t.name()).collect();
            format!(
                "unknown KV cache type {s:?} (expected one of {})",
                names.join(", ")
            )
        })
    }
}

/// `GGML_FP32_TO_BF16`: round to nearest even, NaN kept quiet.
fn bf16_bits(v: f32) -> u16 {
    let u = v.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// `quantize_row_q8_0_ref` on one block: `d = max|x| / 127`, `q = round(x / d)`.
fn q8_0_block(x: &[f32; KV_BLOCK], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(half::f16::from_f32(d).to_le_bytes());
    out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
}

/// `quantize_row_q4_0_ref` on one block: `d = max / −8` (the value of largest magnitude, its
/// sign kept), `q = min(15, ⌊x / d + 8.5⌋)`, weight `j` in the low nibble of byte `j` and
/// weight `j + 16` in its high nibble.
fn q4_0_block(x: &[f32; KV_BLOCK], out: &mut Vec<u8>) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    out.extend(half::f16::from_f32(d).to_le_bytes());
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..KV_BLOCK / 2).map(|j| q(x[j]) | (q(x[j + KV_BLOCK / 2]) << 4)));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling parses back; an unknown one names the accepted ones.
    #[test]
    fn names_round_trip() {
        for t in KvType::ALL {
            assert_eq!(t.name().parse::<KvType>(), Ok(t));
            assert_eq!(KvType::parse(&t.name().to_uppercase()), Some(t));
        }
        let e = "q3".parse::<KvType>().unwrap_err();
        assert!(e.contains("q3") && e.contains("q8_0"), "{e}");
    }

    /// Rows round-trip through the scalar dequantizer within each type's step, padded rows
    /// included; the byte counts are GGUF's.
    #[test]
    fn rows_round_trip() {
        let x: Vec<f32> = (0..80)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        for t in KvType::ALL {
            let mut bytes = Vec::new();
            t.quantize_row(&x, &mut bytes);
            assert_eq!(bytes.len(), t.row_bytes(x.len()), "{t}");
            let mut y = vec![0f32; t.padded(x.len())];
            crate::dequant::dequantize_row(t.format(), &bytes, &mut y).unwrap();
            let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
            let tol = match t {
                KvType::F32 => 0.0,
                KvType::F16 => amax / 1024.0,
                KvType::Bf16 => amax / 128.0,
                KvType::Q8_0 => amax / 127.0 * 0.51,
                // Half a step, a whole one on the side opposite the largest value (q ≤ 15), and
                // the f16 rounding of the scale.
                KvType::Q4_0 => amax / 8.0 * 1.01,
            };
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                assert!((a - b).abs() <= tol, "{t}[{i}]: {a} vs {b}");
            }
            assert!(y[x.len()..].iter().all(|&v| v == 0.0), "{t}: padding");
        }
        assert_eq!(KvType::Q8_0.row_bytes(64), 68);
        assert_eq!(KvType::Q4_0.row_bytes(64), 36);
        assert_eq!(KvType::F16.row_bytes(64), 128);
    }

    /// bf16 rounding is to nearest even, as ggml's.
    #[test]
    fn bf16_rounds_to_nearest_even() {
        for v in [1.0f32, -3.3, 1e-30, 65504.0, f32::MAX, 0.1] {
            assert_eq!(bf16_bits(v), half::bf16::from_f32(v).to_bits(), "{v}");
        }
        assert!(f32::from_bits((bf16_bits(f32::NAN) as u32) << 16).is_nan());
    }
}
