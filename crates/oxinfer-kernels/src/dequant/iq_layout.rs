//! Where the fields of the 256-weight IQ/TQ super-blocks lie: each block's scale `d` and scale
//! codes, and, for the grid formats, each 32-weight group's grid words and sign bits. Read here
//! once for the portable decoder ([`super::iq::decode`]) and the SIMD unpackers
//! (`vecdot::iq_avx2`, `vecdot::iq_neon`), which differ only in how they apply the signs.

use super::float::f16_at;
use super::iq_grids::*;
use crate::format::WeightFormat;

/// Little-endian u16 at `b[i..i + 2]`.
#[inline(always)]
pub(super) fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes(b[i..i + 2].try_into().expect("2 bytes"))
}

/// Little-endian u32 at `b[i..i + 4]`.
#[inline(always)]
pub(super) fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

/// `match format { .. }` with one arm per 256-weight IQ/TQ format, each running `body` with
/// `f` bound to that format as a constant: code inlined into `body` then folds its own
/// per-format matches (the readers below, the scales) instead of branching on them. Formats
/// outside the list give `other`.
macro_rules! per_iq_format {
    ($format:expr, |$f:ident| $body:expr, else $other:expr) => {
        $crate::dequant::iq_layout::per_iq_format!(
            @arms $format, $f, $body, $other,
            IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M IQ4_XS TQ1_0 TQ2_0
        )
    };
    (@arms $format:expr, $f:ident, $body:expr, $other:expr, $($v:ident)*) => {{
        use $crate::format::WeightFormat as W;
        match $format {
            $(W::$v => {
                let $f = W::$v;
                $body
            })*
            _ => $other,
        }
    }};
}
#[cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(unused_imports) // only the x86 and NEON unpackers use it outside this file
)]
pub(crate) use per_iq_format;

/// The block scale `d` (as f32) and the raw scale code of each group of 16 weights of a
/// super-block `b` of a 256-weight IQ/TQ `format` (formats with one code per 32 weights repeat
/// it; the TQ formats have none: zeros).
///
/// # Panics
/// If `format` is not such a format or `b` is shorter than its block.
#[inline(always)]
pub(crate) fn scale_codes(format: WeightFormat, b: &[u8]) -> (f32, [u8; 16]) {
    use WeightFormat::*;
    // The exact block: with `format` a constant (`per_iq_format!`) its length is one too, and
    // the reads below need no bounds checks (which kept them from vectorizing).
    let b = &b[..format.block_bytes()];
    let nibble = |at: usize, i: usize| b[at + i / 2] >> (4 * (i % 2)) & 15;
    match format {
        IQ2_XXS => (
            f16_at(b, 0),
            codes(|s| (u32_at(b, 6 + 8 * (s / 2)) >> 28) as u8),
        ),
        IQ2_XS => (f16_at(b, 0), codes(|s| nibble(66, s))),
        IQ2_S => (f16_at(b, 0), codes(|s| nibble(74, s))),
        IQ3_XXS => (
            f16_at(b, 0),
            codes(|s| (u32_at(b, 66 + 4 * (s / 2)) >> 28) as u8),
        ),
        IQ3_S => (f16_at(b, 0), codes(|s| nibble(106, s / 2))),
        IQ1_S => (
            f16_at(b, 0),
            codes(|s| (u16_at(b, 34 + 2 * (s / 2)) >> 12 & 7) as u8),
        ),
        IQ1_M => {
            // The f16 `d` is split over the top nibbles of the four scale words.
            let sc = four(|k| u16_at(b, 48 + 2 * k));
            let bits =
                (sc[0] >> 12) | (sc[1] >> 8 & 0x00F0) | (sc[2] >> 4 & 0x0F00) | (sc[3] & 0xF000);
            let d = half::f16::from_bits(bits).to_f32();
            (d, codes(|s| (sc[s / 4] >> (3 * (s % 4)) & 7) as u8))
        }
        IQ4_XS => {
            // Six bits per 32 weights: four in scales_l (bytes 4..8), two in scales_h (2..4).
            let sh = u16_at(b, 2);
            let code = |ib: usize| nibble(4, ib) | ((sh >> (2 * ib) & 3) as u8) << 4;
            (f16_at(b, 0), codes(|s| code(s / 2)))
        }
        TQ1_0 => (f16_at(b, 52), [0; 16]),
        TQ2_0 => (f16_at(b, 64), [0; 16]),
        other => unreachable!("{other} is not a 256-weight IQ/TQ format"),
    }
}

/// The 16 codes `f(s)`, `s` in `0..16` (formats with a code per 32 weights read `s / 2`).
#[inline(always)]
fn codes(f: impl Fn(usize) -> u8) -> [u8; 16] {
    let mut c = [0; 16];
    for (s, c) in c.iter_mut().enumerate() {
        *c = f(s);
    }
    c
}

/// TQ1_0's digit weights: base-3 digit `p` of byte `v` is `((v · POW3[p] mod 256) · 3) >> 8`.
/// Bytes 0..32 and 32..48 hold five digits each (weights `32 p + m` and `160 + 16 p + m`),
/// bytes 48..52 four (weights `240 + 4 p + m`); the quant is the digit minus 1.
pub(crate) const TQ1_POW3: [u8; 5] = [1, 3, 9, 27, 81];

/// One group of 32 weights of a grid format, before the signs are applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GridGroup {
    /// Four grid words: byte `j` of word `e` is the magnitude (IQ1: the signed grid value, as
    /// i8) of weight `8 e + j`.
    pub grid: [u64; 4],
    /// Bit `i` set: weight `i` is negative (IQ1_S / IQ1_M: its shift is −1/8, not +1/8).
    pub bits: u32,
}

/// Whether `format` is a grid format ([`for_each_group`] reads it).
pub(crate) fn is_grid(format: WeightFormat) -> bool {
    use WeightFormat::*;
    matches!(
        format,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M
    )
}

/// Whether `format`'s grid values are IQ1's `{-1, 0, 1}`, shifted by ±1/8 (weight `8 g ± 1` in
/// eighths), rather than magnitudes signed by the bits.
pub(crate) fn is_iq1(format: WeightFormat) -> bool {
    matches!(format, WeightFormat::IQ1_S | WeightFormat::IQ1_M)
}

/// Calls `f(k, group k)` for the eight groups of super-block `b` of the grid `format`, in
/// order. The match on `format` is taken once, outside a loop of its own per format, so each
/// loop inlines its format's reader ([`grid_group`]) with the block length known.
///
/// # Panics
/// If `format` is not a grid format ([`is_grid`]) or `b` is shorter than its block.
#[inline(always)]
pub(crate) fn for_each_group(format: WeightFormat, b: &[u8], mut f: impl FnMut(usize, GridGroup)) {
    per_iq_format!(
        format,
        |fmt| {
            let b = &b[..fmt.block_bytes()];
            for k in 0..8 {
                f(k, grid_group(fmt, b, k));
            }
        },
        else unreachable!("{format} is not an IQ grid format")
    )
}

/// Group `k` (weights `32 k .. 32 k + 32`, `k < 8`) of super-block `b` of the grid `format`.
///
/// # Panics
/// If `format` is not a grid format ([`is_grid`]) or `b` is shorter than its block.
#[inline(always)]
fn grid_group(format: WeightFormat, b: &[u8], k: usize) -> GridGroup {
    use WeightFormat::*;
    match format {
        IQ2_XXS => {
            // 4 grid indices (bytes), then 4 × 7 sign-table indices and the scale code.
            let off = 2 + 8 * k;
            let aux = u32_at(b, off + 4);
            GridGroup {
                grid: four(|e| IQ2XXS_GRID[b[off + e] as usize]),
                bits: ksigns(aux),
            }
        }
        IQ2_XS => {
            // 4 u16: a 9-bit grid index and a 7-bit sign-table index each.
            let v = four(|e| u16_at(b, 2 + 2 * (4 * k + e)));
            GridGroup {
                grid: four(|e| IQ2XS_GRID[(v[e] & 511) as usize]),
                bits: signs4(four(|e| KSIGNS_IQ2XS[(v[e] >> 9) as usize])),
            }
        }
        IQ2_S => {
            // qs (2..34) low index bytes, two high bits each from qh (66..74); signs (34..66)
            // one byte per 8 weights.
            let qh = b[66 + k];
            GridGroup {
                grid: four(|e| {
                    let idx = b[2 + 4 * k + e] as usize | ((qh >> (2 * e) & 3) as usize) << 8;
                    IQ2S_GRID[idx]
                }),
                bits: u32_at(b, 34 + 4 * k),
            }
        }
        IQ3_XXS => {
            // 8 grid indices of 4 weights each (2..66), then per group a u32 of 4 × 7
            // sign-table indices and the scale code (66..98).
            let qs = &b[2 + 8 * k..10 + 8 * k];
            GridGroup {
                grid: four(|e| {
                    let g = |i: usize| u64::from(IQ3XXS_GRID[qs[i] as usize]);
                    g(2 * e) | g(2 * e + 1) << 32
                }),
                bits: ksigns(u32_at(b, 66 + 4 * k)),
            }
        }
        IQ3_S => {
            // 8 index bytes (2..66) with a ninth bit each from qh (66..74); signs (74..106).
            let qh = b[66 + k];
            let g = |j: usize| {
                let idx = b[2 + 8 * k + j] as usize | ((qh >> j & 1) as usize) << 8;
                u64::from(IQ3S_GRID[idx])
            };
            GridGroup {
                grid: four(|e| g(2 * e) | g(2 * e + 1) << 32),
                bits: u32_at(b, 74 + 4 * k),
            }
        }
        IQ1_S => {
            // 4 index bytes (2..34); qh (34..50): 4 × 3 high index bits, code, shift sign.
            let qh = u16_at(b, 34 + 2 * k);
            GridGroup {
                grid: four(|e| {
                    let idx = b[2 + 4 * k + e] as usize | ((qh >> (3 * e) & 7) as usize) << 8;
                    IQ1S_GRID[idx]
                }),
                bits: if qh & 0x8000 != 0 { !0 } else { 0 },
            }
        }
        IQ1_M => {
            // Index bytes (0..32); qh (32..48): a nibble per 8 weights, 3 high index bits and
            // the shift sign.
            let h = four(|e| b[32 + 2 * k + e / 2] >> (4 * (e % 2)));
            GridGroup {
                grid: four(|e| IQ1S_GRID[b[4 * k + e] as usize | ((h[e] & 7) as usize) << 8]),
                bits: signs4(four(|e| if h[e] & 8 != 0 { 0xFF } else { 0 })),
            }
        }
        other => unreachable!("{other} is not an IQ grid format"),
    }
}

/// The 32 sign bits of four 7-bit sign-table indices in the low 28 bits of `aux`.
#[inline(always)]
fn ksigns(aux: u32) -> u32 {
    signs4(four(|l| KSIGNS_IQ2XS[(aux >> (7 * l) & 127) as usize]))
}

/// `[f(0), f(1), f(2), f(3)]`, written out (`array::map` and `from_fn` are not always inlined
/// into the unpack loops).
#[inline(always)]
fn four<T>(f: impl Fn(usize) -> T) -> [T; 4] {
    [f(0), f(1), f(2), f(3)]
}

/// Four sign bytes (weights `8 e .. 8 e + 8` in byte `e`) as one u32.
#[inline(always)]
fn signs4(s: [u8; 4]) -> u32 {
    u32::from_le_bytes(s)
}
