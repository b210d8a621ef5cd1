//! Weight formats: float formats and llama.cpp's block-quantized types.
//!
//! Block layouts follow llama.cpp (`ggml-common.h`); all multi-byte fields are little endian.
//! Legacy quants hold 32 weights per block, K-quants 256 (a "super-block").

use std::fmt;

/// Storage format of a weight tensor. One enum for the whole project.
///
/// Block layouts (bytes in order; `f16` = IEEE half, `qs`/`qh` = packed quants):
///
/// | format | weights/block | bytes/block | layout |
/// |---|---|---|---|
/// | `F32`  | 1   | 4   | f32 |
/// | `F16`  | 1   | 2   | IEEE f16 |
/// | `BF16` | 1   | 2   | bfloat16 |
/// | `Q4_0` | 32  | 18  | f16 d; u8 qs\[16] |
/// | `Q4_1` | 32  | 20  | f16 d, m; u8 qs\[16] |
/// | `Q5_0` | 32  | 22  | f16 d; u8 qh\[4]; u8 qs\[16] |
/// | `Q5_1` | 32  | 24  | f16 d, m; u8 qh\[4]; u8 qs\[16] |
/// | `Q8_0` | 32  | 34  | f16 d; i8 qs\[32] |
/// | `Q2_K` | 256 | 84  | u8 scales\[16]; u8 qs\[64]; f16 d, dmin |
/// | `Q3_K` | 256 | 110 | u8 hmask\[32]; u8 qs\[64]; u8 scales\[12]; f16 d |
/// | `Q4_K` | 256 | 144 | f16 d, dmin; u8 scales\[12]; u8 qs\[128] |
/// | `Q5_K` | 256 | 176 | f16 d, dmin; u8 scales\[12]; u8 qh\[32]; u8 qs\[128] |
/// | `Q6_K` | 256 | 210 | u8 ql\[128]; u8 qh\[64]; i8 scales\[16]; f16 d |
/// | `Q8_K` | 256 | 292 | f32 d; i8 qs\[256]; i16 bsums\[16] |
/// | `IQ2_XXS` | 256 | 66 | f16 d; u32 qs\[16] (per 32: 4 grid bytes; 4×7 sign bits + 4-bit scale) |
/// | `IQ2_XS` | 256 | 74 | f16 d; u16 qs\[32] (9-bit grid, 7-bit sign); u8 scales\[8] |
/// | `IQ3_XXS` | 256 | 98 | f16 d; u8 qs\[64] (grid); u32 signs+scales\[8] |
/// | `IQ1_S` | 256 | 50 | f16 d; u8 qs\[32]; u16 qh\[8] |
/// | `IQ4_NL` | 32 | 18 | f16 d; u8 qs\[16] (4-bit codes into a 16-value table) |
/// | `IQ3_S` | 256 | 110 | f16 d; u8 qs\[64]; u8 qh\[8]; u8 signs\[32]; u8 scales\[4] |
/// | `IQ2_S` | 256 | 82 | f16 d; u8 qs\[32]; u8 signs\[32]; u8 qh\[8]; u8 scales\[8] |
/// | `IQ4_XS` | 256 | 136 | f16 d; u16 scales_h; u8 scales_l\[4]; u8 qs\[128] |
/// | `IQ1_M` | 256 | 56 | u8 qs\[32]; u8 qh\[16]; u16 scales\[4] (f16 d in their top nibbles) |
/// | `TQ1_0` | 256 | 54 | u8 qs\[48], qh\[4] (base-3 digits); f16 d |
/// | `TQ2_0` | 256 | 66 | u8 qs\[64] (2-bit); f16 d |
/// | `MXFP4` | 32 | 17 | u8 e (E8M0 scale); u8 qs\[16] (4-bit E2M1 codes) |
///
/// The IQ types look their quants up in grids (`dequant/iq_grids.rs`, generated from the
/// `gguf` package); see `dequant/iq.rs` for each decoding.
///
/// The *split* formats ([`WeightFormat::SPLIT`], oxinfer's own, see `DESIGN.md` "File formats
/// we write") keep quants and scales in two separate buffers, so a pre-quantized safetensors
/// checkpoint stores each as an ordinary tensor and the kernels borrow both in place. For them
/// `block_bytes` counts the quants buffer only; [`WeightFormat::scale_bytes`] the scales buffer.
///
/// | format | weights/block | quant bytes/block | scale | weight |
/// |---|---|---|---|---|
/// | `Q8` | 32 | 32 (i8 q) | f32 `d` | `d * q` |
/// | `Q4` | 32 | 16 (u8: weight `j` in the low nibble of byte `j`, weight `j + 16` in its high nibble) | f16 `d` | `d * (q - 8)` |
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE half float.
    F16,
    /// bfloat16 (the upper half of an f32).
    BF16,
    /// 32 weights: `d * (q - 8)`, 4-bit `q`.
    Q4_0,
    /// 32 weights: `d * q + m`, 4-bit `q`.
    Q4_1,
    /// 32 weights: `d * (q - 16)`, 5-bit `q`.
    Q5_0,
    /// 32 weights: `d * q + m`, 5-bit `q`.
    Q5_1,
    /// 32 weights: `d * q`, 8-bit signed `q`.
    Q8_0,
    /// 256 weights in 16 groups of 16: 2-bit quants, 4-bit scales and mins.
    Q2K,
    /// 256 weights in 16 groups of 16: 3-bit quants, 6-bit signed scales.
    Q3K,
    /// 256 weights in 8 groups of 32: 4-bit quants, 6-bit scales and mins.
    Q4K,
    /// 256 weights in 8 groups of 32: 5-bit quants, 6-bit scales and mins.
    Q5K,
    /// 256 weights in 16 groups of 16: 6-bit quants, 8-bit signed scales.
    Q6K,
    /// 256 weights: `d * q`, f32 `d`, 8-bit signed `q` (plus group sums; used for activations).
    Q8K,
    /// 256 weights: 8-weight grid entries (8, 25 or 43) with signs, 4-bit scale per 32.
    IQ2_XXS,
    /// 256 weights: 512-entry 8-weight grid with signs, 4-bit scale per 16.
    IQ2_XS,
    /// 256 weights: 4-weight grid entries with signs, 4-bit scale per 32.
    IQ3_XXS,
    /// 256 weights: 2048-entry ternary 8-weight grid plus a ±1/8 shift, 3-bit scale per 32.
    IQ1_S,
    /// 32 weights: `d * table[q]`, 4-bit `q` into a 16-value non-linear table.
    IQ4_NL,
    /// 256 weights: 512-entry 4-weight grid with explicit sign bits, 4-bit scale per 32.
    IQ3_S,
    /// 256 weights: 1024-entry 8-weight grid with explicit sign bits, 4-bit scale per 16.
    IQ2_S,
    /// 256 weights: IQ4_NL's table with a 6-bit signed scale per 32.
    IQ4_XS,
    /// 256 weights: IQ1_S's grid, 3-bit scale per 16, shift per 8, no block-level f16 field.
    IQ1_M,
    /// 256 ternary weights `d * (t - 1)`, five base-3 digits per byte.
    TQ1_0,
    /// 256 weights `d * (q - 1)`, 2-bit `q` (values -1, 0, 1, 2).
    TQ2_0,
    /// 32 weights: OCP microscaling FP4, E2M1 values with an E8M0 power-of-two scale.
    MXFP4,
    /// Split format: 32 weights `d * q`, i8 `q` in the quants buffer, f32 `d` in the scales buffer.
    Q8,
    /// Split format: 32 weights `d * (q - 8)`, 4-bit `q` (Q4_0 nibble order) in the quants
    /// buffer, f16 `d` in the scales buffer.
    Q4,
}

impl WeightFormat {
    /// Every GGML format, in GGML type-id order (the split formats are in [`Self::SPLIT`]).
    pub const ALL: [WeightFormat; 26] = [
        Self::F32,
        Self::F16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q8K,
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::IQ1_M,
        Self::BF16,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// The formats whose quants are looked up in tables (IQ*), ternary (TQ*) or FP4 (MXFP4).
    pub const IQ: [WeightFormat; 12] = [
        Self::IQ2_XXS,
        Self::IQ2_XS,
        Self::IQ3_XXS,
        Self::IQ1_S,
        Self::IQ4_NL,
        Self::IQ3_S,
        Self::IQ2_S,
        Self::IQ4_XS,
        Self::IQ1_M,
        Self::TQ1_0,
        Self::TQ2_0,
        Self::MXFP4,
    ];

    /// oxinfer's split formats (quants and scales in separate buffers), not GGML types.
    pub const SPLIT: [WeightFormat; 2] = [Self::Q8, Self::Q4];

    /// The format of a GGML type id (as stored in GGUF tensor infos); `None` for ids this crate
    /// does not handle (Q8_1, NVFP4, Q1_0, integer types, removed ids 4, 5, 31–33, 36–38, ...).
    pub fn from_ggml_type(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            16 => Self::IQ2_XXS,
            17 => Self::IQ2_XS,
            18 => Self::IQ3_XXS,
            19 => Self::IQ1_S,
            20 => Self::IQ4_NL,
            21 => Self::IQ3_S,
            22 => Self::IQ2_S,
            23 => Self::IQ4_XS,
            29 => Self::IQ1_M,
            30 => Self::BF16,
            34 => Self::TQ1_0,
            35 => Self::TQ2_0,
            39 => Self::MXFP4,
            _ => return None,
        })
    }

    /// The GGML/GGUF name of a type id this crate does not handle (`"Q8_1"`, `"NVFP4"`,
    /// integer and removed types, ...), for error messages; `None` for ids GGML never had.
    pub fn unhandled_ggml_type_name(id: u32) -> Option<&'static str> {
        Some(match id {
            4 => "Q4_2 (removed from GGML)",
            5 => "Q4_3 (removed from GGML)",
            9 => "Q8_1",
            24 => "I8",
            25 => "I16",
            26 => "I32",
            27 => "I64",
            28 => "F64",
            31 => "Q4_0_4_4 (removed from GGML)",
            32 => "Q4_0_4_8 (removed from GGML)",
            33 => "Q4_0_8_8 (removed from GGML)",
            36 => "IQ4_NL_4_4 (removed from GGML)",
            37 => "IQ4_NL_4_8 (removed from GGML)",
            38 => "IQ4_NL_8_8 (removed from GGML)",
            40 => "NVFP4",
            41 => "Q1_0",
            _ => return None,
        })
    }

    /// The GGML type id of this format; `None` for the split formats, which GGML lacks.
    pub fn ggml_type(self) -> Option<u32> {
        Some(match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::IQ2_XXS => 16,
            Self::IQ2_XS => 17,
            Self::IQ3_XXS => 18,
            Self::IQ1_S => 19,
            Self::IQ4_NL => 20,
            Self::IQ3_S => 21,
            Self::IQ2_S => 22,
            Self::IQ4_XS => 23,
            Self::IQ1_M => 29,
            Self::BF16 => 30,
            Self::TQ1_0 => 34,
            Self::TQ2_0 => 35,
            Self::MXFP4 => 39,
            Self::Q8 | Self::Q4 => return None,
        })
    }

    /// The name as GGUF / llama.cpp spell it: `"F32"`, `"BF16"`, `"Q4_0"`, `"Q4_K"`, ...
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
            Self::IQ2_XXS => "IQ2_XXS",
            Self::IQ2_XS => "IQ2_XS",
            Self::IQ3_XXS => "IQ3_XXS",
            Self::IQ1_S => "IQ1_S",
            Self::IQ4_NL => "IQ4_NL",
            Self::IQ3_S => "IQ3_S",
            Self::IQ2_S => "IQ2_S",
            Self::IQ4_XS => "IQ4_XS",
            Self::IQ1_M => "IQ1_M",
            Self::TQ1_0 => "TQ1_0",
            Self::TQ2_0 => "TQ2_0",
            Self::MXFP4 => "MXFP4",
            Self::Q8 => "Q8",
            Self::Q4 => "Q4",
        }
    }

    /// The format named `name` as GGUF spells it (case-insensitive); inverse of [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .chain(Self::SPLIT)
            .find(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// Weights per block: 1 for float formats, 32 for legacy quants, IQ4_NL and MXFP4, 256 for
    /// K-quants and the other IQ/TQ types.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q8 | Self::Q4 | Self::IQ4_NL | Self::MXFP4 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => 256,
            Self::IQ2_XXS | Self::IQ2_XS | Self::IQ3_XXS | Self::IQ1_S | Self::IQ3_S => 256,
            Self::IQ2_S | Self::IQ4_XS | Self::IQ1_M | Self::TQ1_0 | Self::TQ2_0 => 256,
        }
    }

    /// Bytes per block (for the split formats: of the quants buffer only).
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q8 => 32,
            Self::Q4 => 16,
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q2K => 84,
            Self::Q3K => 110,
            Self::Q4K => 144,
            Self::Q5K => 176,
            Self::Q6K => 210,
            Self::Q8K => 292,
            Self::IQ2_XXS => 66,
            Self::IQ2_XS => 74,
            Self::IQ3_XXS => 98,
            Self::IQ1_S => 50,
            Self::IQ4_NL => 18,
            Self::IQ3_S => 110,
            Self::IQ2_S => 82,
            Self::IQ4_XS => 136,
            Self::IQ1_M => 56,
            Self::TQ1_0 => 54,
            Self::TQ2_0 => 66,
            Self::MXFP4 => 17,
        }
    }

    /// Bytes of one block's scale in the separate scales buffer: 4 (f32) for `Q8`, 2 (f16) for
    /// `Q4`, 0 for every format that keeps its scales inside its blocks.
    pub fn scale_bytes(self) -> usize {
        match self {
            Self::Q8 => 4,
            Self::Q4 => 2,
            _ => 0,
        }
    }

    /// Whether quants and scales live in separate buffers ([`Self::SPLIT`]).
    pub fn is_split(self) -> bool {
        self.scale_bytes() > 0
    }

    /// Bytes of the scales of a row of `n` weights (0 for formats without a scales buffer);
    /// `None` when `n` is not a multiple of the block size.
    pub fn row_scale_bytes(self, n: usize) -> Option<usize> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.scale_bytes())
    }

    /// Whether this is a block-quantized format (not F32/F16/BF16).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes of a row of `n` weights; `None` when `n` is not a multiple of
    /// [`block_size`](Self::block_size) or the size overflows `usize`.
    pub fn row_bytes(self, n: usize) -> Option<usize> {
        let bs = self.block_size();
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.block_bytes())
    }
}

impl fmt::Display for WeightFormat {
    /// Writes [`WeightFormat::name`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ggml_ids_round_trip() {
        for f in WeightFormat::ALL {
            assert_eq!(
                WeightFormat::from_ggml_type(f.ggml_type().unwrap()),
                Some(f)
            );
            assert_eq!(WeightFormat::from_name(f.name()), Some(f));
            assert_eq!(f.to_string(), f.name());
        }
        for id in [4, 5, 9, 24, 28, 31, 33, 36, 38, 40, 41, 1000] {
            assert_eq!(WeightFormat::from_ggml_type(id), None, "id {id}");
            assert_eq!(
                WeightFormat::unhandled_ggml_type_name(id).is_some(),
                id != 1000
            );
        }
        for f in WeightFormat::ALL {
            assert_eq!(
                WeightFormat::unhandled_ggml_type_name(f.ggml_type().unwrap()),
                None
            );
        }
        for f in WeightFormat::SPLIT {
            assert_eq!(f.ggml_type(), None);
            assert_eq!(WeightFormat::from_name(f.name()), Some(f));
            assert!(f.is_split() && f.is_quantized() && f.block_size() == 32);
        }
        assert_eq!(WeightFormat::Q8.row_bytes(64), Some(64));
        assert_eq!(WeightFormat::Q4.row_bytes(64), Some(32));
        assert_eq!(WeightFormat::Q8.row_scale_bytes(64), Some(8));
        assert_eq!(WeightFormat::Q4.row_scale_bytes(64), Some(4));
        assert_eq!(WeightFormat::Q4_0.row_scale_bytes(64), Some(0));
        let ids: Vec<u32> = WeightFormat::ALL
            .iter()
            .map(|f| f.ggml_type().unwrap())
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ALL is in id order");
    }

    #[test]
    fn block_geometry_matches_llama_cpp() {
        // (format, weights per block, bytes per block) from ggml.c's type traits.
        let expected = [
            (WeightFormat::F32, 1, 4),
            (WeightFormat::F16, 1, 2),
            (WeightFormat::BF16, 1, 2),
            (WeightFormat::Q4_0, 32, 2 + 16),
            (WeightFormat::Q4_1, 32, 2 + 2 + 16),
            (WeightFormat::Q5_0, 32, 2 + 4 + 16),
            (WeightFormat::Q5_1, 32, 2 + 2 + 4 + 16),
            (WeightFormat::Q8_0, 32, 2 + 32),
            (WeightFormat::Q2K, 256, 16 + 64 + 2 + 2),
            (WeightFormat::Q3K, 256, 32 + 64 + 12 + 2),
            (WeightFormat::Q4K, 256, 2 + 2 + 12 + 128),
            (WeightFormat::Q5K, 256, 2 + 2 + 12 + 32 + 128),
            (WeightFormat::Q6K, 256, 128 + 64 + 16 + 2),
            (WeightFormat::Q8K, 256, 4 + 256 + 2 * 16),
            (WeightFormat::IQ2_XXS, 256, 2 + 64),
            (WeightFormat::IQ2_XS, 256, 2 + 64 + 8),
            (WeightFormat::IQ3_XXS, 256, 2 + 64 + 32),
            (WeightFormat::IQ1_S, 256, 2 + 32 + 16),
            (WeightFormat::IQ4_NL, 32, 2 + 16),
            (WeightFormat::IQ3_S, 256, 2 + 64 + 8 + 32 + 4),
            (WeightFormat::IQ2_S, 256, 2 + 32 + 32 + 8 + 8),
            (WeightFormat::IQ4_XS, 256, 2 + 2 + 4 + 128),
            (WeightFormat::IQ1_M, 256, 32 + 16 + 8),
            (WeightFormat::TQ1_0, 256, 48 + 4 + 2),
            (WeightFormat::TQ2_0, 256, 64 + 2),
            (WeightFormat::MXFP4, 32, 1 + 16),
        ];
        for (f, bs, bb) in expected {
            assert_eq!((f.block_size(), f.block_bytes()), (bs, bb), "{f}");
        }
    }

    #[test]
    fn row_bytes_edges() {
        assert_eq!(WeightFormat::Q4K.row_bytes(0), Some(0));
        assert_eq!(WeightFormat::Q4K.row_bytes(255), None);
        assert_eq!(WeightFormat::Q4K.row_bytes(512), Some(288));
        assert_eq!(WeightFormat::F32.row_bytes(usize::MAX), None);
        assert_eq!(WeightFormat::F16.row_bytes(usize::MAX / 2 + 1), None);
        assert_eq!(
            WeightFormat::F16.row_bytes(usize::MAX / 2),
            Some(usize::MAX - 1)
        );
        assert_eq!(WeightFormat::Q8_0.row_bytes(usize::MAX - 31), None);
    }

    fn any_format() -> impl Strategy<Value = WeightFormat> {
        proptest::sample::select(WeightFormat::ALL.to_vec())
    }

    proptest! {
        #[test]
        fn row_bytes_arithmetic(f in any_format(), blocks in 0usize..100_000, extra in 0usize..256) {
            let bs = f.block_size();
            let n = blocks * bs + extra % bs;
            let got = f.row_bytes(n);
            if n % bs == 0 {
                prop_assert_eq!(got, Some(blocks * f.block_bytes()));
                // additive over concatenated rows
                prop_assert_eq!(f.row_bytes(n + bs), Some(got.unwrap() + f.block_bytes()));
            } else {
                prop_assert_eq!(got, None);
            }
        }

        #[test]
        fn row_bytes_never_panics(f in any_format(), n in any::<usize>()) {
            match f.row_bytes(n) {
                Some(b) => {
                    prop_assert_eq!(n % f.block_size(), 0);
                    prop_assert_eq!(b as u128, (n / f.block_size()) as u128 * f.block_bytes() as u128);
                }
                None => prop_assert!(
                    n % f.block_size() != 0
                        || (n / f.block_size()) as u128 * f.block_bytes() as u128 > usize::MAX as u128
                ),
            }
        }
    }
}
