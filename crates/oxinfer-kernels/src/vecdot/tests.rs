//! Every SIMD kernel against its scalar twin, and both against the f32 reference
//! (dequantized weights · activations) within the int8 quantization error.

use super::*;
use crate::dequant::dequantize_row;
use crate::q8::{quantize_q8, quantize_q8k};
use crate::test_util::panic_message;
use proptest::prelude::*;

/// A row of `n` weights of `format` from random bytes with sane f16 scales.
pub(crate) fn random_row(format: WeightFormat, n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let nb = n / format.block_size();
    let bb = format.block_bytes();
    let mut row: Vec<u8> = (0..nb * bb).map(|_| next() as u8).collect();
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    for blk in row.chunks_exact_mut(bb) {
        let a = f16(((next() % 1000) as f32 / 1000.0 - 0.5) * 0.2);
        let b = f16(((next() % 1000) as f32 / 1000.0) * 0.1);
        let mut put = |at: usize, v: [u8; 2]| blk[at..at + 2].copy_from_slice(&v);
        match format {
            WeightFormat::F16 | WeightFormat::BF16 | WeightFormat::F32 => {}
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => put(0, a),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => {
                put(0, a);
                put(2, b);
            }
            WeightFormat::Q2K => {
                put(80, a);
                put(82, b);
            }
            WeightFormat::Q3K => put(108, a),
            WeightFormat::Q4K | WeightFormat::Q5K => {
                put(0, a);
                put(2, b);
            }
            WeightFormat::Q6K => put(208, a),
            WeightFormat::Q8K => blk[..4].copy_from_slice(&0.01f32.to_le_bytes()),
            WeightFormat::MXFP4 => blk[0] = 118 + blk[0] % 8,
            WeightFormat::IQ4_NL => put(0, a),
            f @ (WeightFormat::IQ2_XXS
            | WeightFormat::IQ2_XS
            | WeightFormat::IQ2_S
            | WeightFormat::IQ3_XXS
            | WeightFormat::IQ3_S
            | WeightFormat::IQ1_S
            | WeightFormat::IQ1_M
            | WeightFormat::IQ4_XS
            | WeightFormat::TQ1_0
            | WeightFormat::TQ2_0) => put_iq_d(f, blk, a),
            WeightFormat::Q8 | WeightFormat::Q4 => {
                unreachable!("split formats are tested in quantize")
            }
        }
    }
    if format == WeightFormat::F32 {
        for c in row.chunks_exact_mut(4) {
            let v = ((next() % 2000) as f32 / 1000.0) - 1.0;
            c.copy_from_slice(&v.to_le_bytes());
        }
    }
    if format == WeightFormat::F16 || format == WeightFormat::BF16 {
        for c in row.chunks_exact_mut(2) {
            let v = ((next() % 2000) as f32 / 1000.0) - 1.0;
            let b = if format == WeightFormat::F16 {
                half::f16::from_f32(v).to_le_bytes()
            } else {
                half::bf16::from_f32(v).to_le_bytes()
            };
            c.copy_from_slice(&b);
        }
    }
    row
}

/// Writes the f16 block scale `d` (little-endian bytes) into super-block `blk` of a 256-weight
/// IQ/TQ `format`, where `dequant::iq_layout::scale_codes` reads it.
pub(crate) fn put_iq_d(format: WeightFormat, blk: &mut [u8], d: [u8; 2]) {
    match format {
        WeightFormat::TQ1_0 => blk[52..54].copy_from_slice(&d),
        WeightFormat::TQ2_0 => blk[64..66].copy_from_slice(&d),
        WeightFormat::IQ1_M => {
            // f16 d in the top nibbles of the four scale words (bytes 49, 51, 53, 55)
            let d = u16::from_le_bytes(d);
            for k in 0..4 {
                let nib = ((d >> (4 * k)) & 0xF) as u8;
                blk[49 + 2 * k] = (blk[49 + 2 * k] & 0x0F) | (nib << 4);
            }
        }
        _ => blk[0..2].copy_from_slice(&d),
    }
}

fn kquant_dot(format: WeightFormat, w: &[u8], xq: &[BlockQ8K], isa: Isa) -> f32 {
    let mut kb = KBlock::default();
    let mut sum = 0.0;
    for (b, y) in w.chunks_exact(format.block_bytes()).zip(xq) {
        unpack_k_isa(format, b, &mut kb, isa);
        let mut plain = KBlock::default();
        unpack_k(format, b, &mut plain);
        assert_eq!(kb.q, plain.q, "{format}: SIMD unpack");
        assert_eq!((kb.sc, kb.m), (plain.sc, plain.m), "{format}: scales");
        sum += dot_kblock(&kb, y, isa);
    }
    sum
}

fn both(format: WeightFormat, w: &[u8], x: &[f32], isa: Isa) -> (f32, f32) {
    let n = x.len();
    match act_kind(format) {
        ActKind::F32 => (
            dot_float(format, w, x, Isa::Scalar),
            dot_float(format, w, x, isa),
        ),
        ActKind::Q8 => {
            let mut q = vec![BlockQ8::default(); n / 32];
            quantize_q8(x, &mut q);
            (
                dot_q8(format, w, &q, Isa::Scalar),
                dot_q8(format, w, &q, isa),
            )
        }
        ActKind::Q8K => {
            let mut q = vec![BlockQ8K::default(); n / 256];
            quantize_q8k(x, &mut q);
            if format == WeightFormat::Q8K {
                let v = dot_q8k_row(w, &q);
                return (v, v);
            }
            (
                kquant_dot(format, w, &q, Isa::Scalar),
                kquant_dot(format, w, &q, isa),
            )
        }
    }
}

/// `rows` rows of [`random_row`] back to back (each its own seed).
pub(crate) fn random_matrix_rows(
    format: WeightFormat,
    rows: usize,
    n: usize,
    seed: u64,
) -> Vec<u8> {
    (0..rows as u64)
        .flat_map(|r| random_row(format, n, seed.wrapping_mul(1000) + r))
        .collect()
}

const FORMATS: [WeightFormat; 25] = [
    WeightFormat::F32,
    WeightFormat::F16,
    WeightFormat::BF16,
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::Q2K,
    WeightFormat::Q3K,
    WeightFormat::Q4K,
    WeightFormat::Q5K,
    WeightFormat::Q6K,
    WeightFormat::IQ2_XXS,
    WeightFormat::IQ2_XS,
    WeightFormat::IQ3_XXS,
    WeightFormat::IQ1_S,
    WeightFormat::IQ4_NL,
    WeightFormat::IQ3_S,
    WeightFormat::IQ2_S,
    WeightFormat::IQ4_XS,
    WeightFormat::IQ1_M,
    WeightFormat::TQ1_0,
    WeightFormat::TQ2_0,
    WeightFormat::MXFP4,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn simd_matches_scalar_twin_and_f32_reference(fi in 0usize..FORMATS.len(), blocks in 1usize..5, extra in 0usize..9, seed in any::<u64>()) {
        let format = FORMATS[fi];
        // Float formats get ragged lengths; block formats whole blocks.
        let n = if format.block_size() == 1 { blocks * 37 + extra } else { blocks * format.block_size().max(32) * if format.block_size() == 32 { 1 + extra } else { 1 } };
        let w = random_row(format, n, seed);
        let x: Vec<f32> = (0..n).map(|i| (((i as u64).wrapping_mul(seed | 1) >> 7) % 2001) as f32 / 1000.0 - 1.0).collect();
        for isa in available_isas() {
        let (s, v) = both(format, &w, &x, isa);
        let scale: f32 = {
            let mut wf = vec![0f32; n];
            dequantize_row(format, &w, &mut wf).unwrap();
            let exact: f64 = wf.iter().zip(&x).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum();
            let mag: f32 = wf.iter().zip(&x).map(|(a, b)| (a * b).abs()).sum::<f32>().max(1e-6);
            // int8 activations: each product off by at most |w| * d_x / 2 (~0.4 % of amax).
            let bound = if act_kind(format) == ActKind::F32 { 1e-4 * mag } else { 0.5 * wf.iter().map(|a| a.abs()).sum::<f32>() * x.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0 + 1e-4 * mag };
            prop_assert!((f64::from(s) - exact).abs() <= f64::from(bound) * 1.0 + 1e-5, "{format}: scalar {s} vs exact {exact} (bound {bound})");
            mag
        };
        prop_assert!((s - v).abs() <= 1e-5 * scale + 1e-6, "{format}: scalar {s} vs {isa:?} {v}");
        }
    }
}

/// The 32-weight formats with four-token (four-row) kernels.
const FOUR_TOKEN_FORMATS: [WeightFormat; 7] = [
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::IQ4_NL,
    WeightFormat::MXFP4,
];

/// The four-token kernels give each token what the one-token kernel gives it, on every ISA.
#[test]
fn four_token_kernels_match_one_token() {
    for (fi, format) in FOUR_TOKEN_FORMATS.into_iter().enumerate() {
        let n = 32 * 7;
        let w = random_row(format, n, 11 + fi as u64);
        let acts: Vec<Vec<BlockQ8>> = (0..4)
            .map(|k| {
                let x: Vec<f32> = (0..n)
                    .map(|i| ((i * 31 + k * 17) % 97) as f32 / 48.0 - 1.0)
                    .collect();
                let mut q = vec![BlockQ8::default(); n / 32];
                quantize_q8(&x, &mut q);
                q
            })
            .collect();
        for isa in available_isas() {
            let four = dot_q8_x4(format, &w, [&acts[0], &acts[1], &acts[2], &acts[3]], isa);
            for k in 0..4 {
                let one = dot_q8(format, &w, &acts[k], Isa::Scalar);
                assert!(
                    (four[k] - one).abs() <= 1e-5 * one.abs().max(1.0),
                    "{format} {isa:?} token {k}: {} vs scalar {one}",
                    four[k]
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The multi-token and two-row kernels against the one-row scalar twin, at every level.
    #[test]
    fn multi_token_and_row_pair_kernels_match_scalar_twin(fi in 3usize..8, blocks in 1usize..12, seed in any::<u64>()) {
        let format = FORMATS[fi];
        let n = blocks * 32;
        let rows = [random_row(format, n, seed), random_row(format, n, seed ^ 0x5555)];
        let toks: Vec<Vec<BlockQ8>> = (0..4u64)
            .map(|k| {
                let x: Vec<f32> = (0..n as u64)
                    .map(|i| (((i + 7 * k).wrapping_mul(seed | 1) >> 9) % 2001) as f32 / 1000.0 - 1.0)
                    .collect();
                let mut q = vec![BlockQ8::default(); blocks];
                quantize_q8(&x, &mut q);
                q
            })
            .collect();
        let xs = [&toks[0][..], &toks[1][..], &toks[2][..], &toks[3][..]];
        // Rounding scale of each dot product: Σ |w| · |x| over the dequantized values.
        let mag = |r: usize, k: usize| {
            let mut wf = vec![0f32; n];
            dequantize_row(format, &rows[r], &mut wf).unwrap();
            let xa = toks[k].iter().flat_map(|b| b.qs.iter().map(move |&q| (b.d * f32::from(q)).abs()));
            wf.iter().zip(xa).map(|(a, b)| a.abs() * b).sum::<f32>()
        };
        let want: Vec<[f32; 4]> = rows.iter().map(|w| xs.map(|x| dot_q8(format, w, x, Isa::Scalar))).collect();
        for isa in available_isas() {
            let quad = dot_q8_rows4(format, [&rows[0], &rows[1], &rows[1], &rows[0]], xs[2], isa);
            for (j, r) in [0, 1, 1, 0].into_iter().enumerate() {
                let tol = 1e-5 * mag(r, 2) + 1e-6;
                prop_assert!((quad[j] - want[r][2]).abs() <= tol, "{format} rows4 {isa:?}: row {r}: {} vs {}", quad[j], want[r][2]);
            }
            let pair = dot_q8_2x4(format, [&rows[0], &rows[1]], xs, isa);
            for r in 0..2 {
                let x4 = dot_q8_x4(format, &rows[r], xs, isa);
                for k in 0..4 {
                    let tol = 1e-5 * mag(r, k) + 1e-6;
                    prop_assert!((x4[k] - want[r][k]).abs() <= tol, "{format} x4 {isa:?}: row {r} token {k}: {} vs {}", x4[k], want[r][k]);
                    prop_assert!((pair[r][k] - want[r][k]).abs() <= tol, "{format} 2x4 {isa:?}: row {r} token {k}: {} vs {}", pair[r][k], want[r][k]);
                }
            }
        }
    }
}

/// The levels run scalar first and end at the detected one; `OXINFER_TEST_EXPECT_ISA` (set by
/// CI under qemu) names the level the emulated CPU must reach, so no kernel goes untested.
#[test]
fn isa_levels_end_at_the_detected_one() {
    let isas = available_isas();
    assert_eq!(isas[0], Isa::Scalar);
    assert_eq!(isas.last(), Some(&detected_isa()));
    if cfg!(target_arch = "aarch64") {
        assert!(isas.contains(&Isa::Neon), "{isas:?}");
    }
    if cfg!(all(
        target_arch = "wasm32",
        target_feature = "simd128",
        target_feature = "relaxed-simd"
    )) {
        assert_eq!(detected_isa(), Isa::RelaxedSimd128, "{isas:?}");
        assert!(isas.contains(&Isa::Simd128), "{isas:?}");
    } else if cfg!(all(target_arch = "wasm32", target_feature = "simd128")) {
        assert_eq!(detected_isa(), Isa::Simd128, "{isas:?}");
    }
    if let Ok(want) = std::env::var("OXINFER_TEST_EXPECT_ISA") {
        assert_eq!(detected_isa().name(), want, "levels found: {isas:?}");
    }
}

/// Rows shorter (or longer) than their activations, and formats a kernel does not take, stop
/// at the safe entry points with a message naming the format and the byte counts, on every
/// instruction set: the SIMD kernels would otherwise read as many weight bytes as the
/// activations say (`dot_float` read past `w`).
#[test]
#[cfg_attr(
    panic = "abort",
    ignore = "catches a panic; panics abort on this target (wasm)"
)]
fn wrong_lengths_and_formats_panic_with_a_message() {
    let x = vec![0.5f32; 64];
    let blocks = vec![BlockQ8::default(); 4];
    let q4_0 = vec![0u8; 4 * 18];
    for isa in available_isas() {
        let m = panic_message(|| {
            dot_float(WeightFormat::F32, &[0u8; 60 * 4], &x, isa);
        });
        assert!(
            m.contains("F32 weight bytes: 240 given, 64 blocks of 4"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| {
            dot_float(WeightFormat::BF16, &[0u8; 130], &x, isa);
        });
        assert!(m.contains("BF16 weight bytes: 130 given"), "{isa:?}: {m}");
        let m = panic_message(|| {
            dot_float(WeightFormat::Q4_0, &q4_0, &x[..2], isa);
        });
        assert!(m.contains("dot_float takes"), "{isa:?}: {m}");
        let m = panic_message(|| {
            dot_q8(WeightFormat::Q4_0, &q4_0[..3 * 18], &blocks, isa);
        });
        assert!(
            m.contains("Q4_0 weight bytes: 54 given, 4 blocks of 18"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| {
            dot_q8(WeightFormat::Q4K, &[0u8; 144], &blocks, isa);
        });
        assert!(m.contains("dot_q8 takes"), "{isa:?}: {m}");
        let m = panic_message(|| {
            let xs = [&blocks[..], &blocks[..], &blocks[..3], &blocks[..]];
            dot_q8_x4(WeightFormat::Q4_0, &q4_0, xs, isa);
        });
        assert!(
            m.contains("Q4_0 weight bytes: 72 given, 3 blocks"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| {
            let xs = [&blocks[..]; 4];
            dot_q8_2x4(WeightFormat::Q4_0, [&q4_0, &q4_0[..36]], xs, isa);
        });
        assert!(m.contains("Q4_0 weight bytes: 36 given"), "{isa:?}: {m}");
        let m = panic_message(|| {
            dot_split(WeightFormat::Q4, &[0u8; 64], &[0u8; 6], &blocks, isa);
        });
        assert!(
            m.contains("Q4 scale bytes: 6 given, 4 blocks of 2"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| {
            dot_split_x4(
                WeightFormat::Q8,
                &[0u8; 96],
                &[0u8; 16],
                [&blocks[..]; 4],
                isa,
            );
        });
        assert!(
            m.contains("Q8 quant bytes: 96 given, 4 blocks of 32"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| {
            dot_split(WeightFormat::Q8_0, &q4_0, &[], &blocks, isa);
        });
        assert!(m.contains("dot_split takes"), "{isa:?}: {m}");
        let mut kb = KBlock::default();
        let m = panic_message(|| unpack_k_isa(WeightFormat::Q6K, &[0u8; 200], &mut kb, isa));
        assert!(
            m.contains("Q6_K super-block bytes: 200 given"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| unpack_k_isa(WeightFormat::Q8K, &[0u8; 292], &mut kb, isa));
        assert!(m.contains("unpack_k takes"), "{isa:?}: {m}");
    }
}

/// The SIMD128 kernels (and, in a build with relaxed SIMD, the relaxed ones) against their
/// scalar twins on every format, several lengths and seeds (the proptest above samples a few
/// formats per run): the integer kernels return the scalar twin's bits (the same exact integer
/// sums, then the same float steps in the same order), the float rows agree within
/// summation-order rounding.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd128_kernels_match_their_scalar_twins() {
    for simd in available_isas().into_iter().filter(|i| i.is_simd128()) {
        simd128_against_scalar(simd);
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
fn simd128_against_scalar(simd: Isa) {
    for format in FORMATS {
        for seed in 0..12u64 {
            let blocks = 1 + seed as usize % 5;
            let n = if format.block_size() == 1 {
                blocks * 37 + seed as usize % 9
            } else {
                blocks * format.block_size().max(32)
            };
            let w = random_row(format, n, seed);
            let x: Vec<f32> = (0..n)
                .map(|i| ((i as u64 * 7919 + seed * 104_729) % 2001) as f32 / 1000.0 - 1.0)
                .collect();
            let (s, v) = both(format, &w, &x, simd);
            if act_kind(format) == ActKind::F32 {
                let mag: f32 = x.iter().map(|v| v.abs()).sum::<f32>() * 2.0;
                assert!((s - v).abs() <= 1e-5 * mag + 1e-6, "{format}: {s} vs {v}");
                continue;
            }
            assert_eq!(
                s.to_bits(),
                v.to_bits(),
                "{format} n={n} seed {seed}: {s} vs {v}"
            );
            if act_kind(format) == ActKind::Q8 {
                let mut q = vec![BlockQ8::default(); n / 32];
                quantize_q8(&x, &mut q);
                let xs = [&q[..], &q[..], &q[..], &q[..]];
                let want = dot_q8(format, &w, &q, Isa::Scalar).to_bits();
                for got in dot_q8_x4(format, &w, xs, simd) {
                    assert_eq!(got.to_bits(), want, "{format} x4 seed {seed}");
                }
                let rows: Vec<Vec<u8>> = (0..4)
                    .map(|r| random_row(format, n, seed * 4 + r + 100))
                    .collect();
                let four = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
                let got = dot_q8_rows4(format, four, &q, simd);
                for (r, row) in rows.iter().enumerate() {
                    let want = dot_q8(format, row, &q, Isa::Scalar);
                    assert_eq!(
                        got[r].to_bits(),
                        want.to_bits(),
                        "{format} rows4 seed {seed} row {r}: {} vs {want}",
                        got[r]
                    );
                }
            }
        }
    }
    // The split formats (on-load quantization), one and four tokens.
    for format in [WeightFormat::Q8, WeightFormat::Q4] {
        for seed in 1..8u64 {
            let (rows, cols) = (1, 32 * seed as usize);
            let src: Vec<f32> = (0..cols)
                .map(|i| ((i as u64 * 31 + seed * 17) % 201) as f32 / 100.0 - 1.0)
                .collect();
            let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_le_bytes()).collect();
            let m = crate::WeightMatrix::new(WeightFormat::F32, &bytes, rows, cols).unwrap();
            let qz = crate::quantize::quantize_matrix(&m, format).unwrap();
            let (w, s) = (&qz.data[..], &qz.scales[..]);
            let mut q = vec![BlockQ8::default(); cols / 32];
            quantize_q8(&src, &mut q);
            let want = dot_split(format, w, s, &q, Isa::Scalar).to_bits();
            assert_eq!(
                dot_split(format, w, s, &q, simd).to_bits(),
                want,
                "{format}"
            );
            let x4 = dot_split_x4(format, w, s, [&q[..], &q[..], &q[..], &q[..]], simd);
            assert!(x4.iter().all(|v| v.to_bits() == want), "{format} x4");
        }
    }
}

/// The four-row kernels at the ends of both operands' ranges, where the relaxed dot product's
/// 16-bit pair sums are largest (2 · 127 · 128): activations of ±127 and −128 (which the
/// quantizer never writes, but a block may hold) against quant bytes of all zeros, all ones,
/// 0x80 (Q8_0's −128) and 0x7F; every SIMD128 level returns the scalar twin's bits.
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
#[test]
fn simd128_rows4_are_exact_at_the_extremes() {
    let formats = FOUR_TOKEN_FORMATS;
    let patterns: [fn(usize) -> i8; 4] = [
        |_| 127,
        |_| -128,
        |i| if i % 2 == 0 { 127 } else { -128 },
        |i| if i % 3 == 0 { -128 } else { -127 },
    ];
    let n = 64;
    let acts: Vec<Vec<BlockQ8>> = patterns
        .iter()
        .map(|p| {
            (0..n / 32)
                .map(|b| {
                    let qs: [i8; 32] = std::array::from_fn(|i| p(32 * b + i));
                    let d = 0.013;
                    let sum: i32 = qs.iter().map(|&q| i32::from(q)).sum();
                    BlockQ8 {
                        d,
                        s: d * sum as f32,
                        qs,
                    }
                })
                .collect()
        })
        .collect();
    for format in formats {
        let bb = format.block_bytes();
        let head = match format {
            WeightFormat::Q4_1 | WeightFormat::Q5_1 => 4,
            WeightFormat::MXFP4 => 1,
            _ => 2,
        };
        let rows: Vec<Vec<u8>> = [0x00u8, 0xFF, 0x80, 0x7F]
            .iter()
            .enumerate()
            .map(|(r, &fill)| {
                let mut row = random_row(format, n, 7 + r as u64);
                for blk in row.chunks_exact_mut(bb) {
                    blk[head..].fill(fill);
                }
                row
            })
            .collect();
        let four = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
        for simd in available_isas().into_iter().filter(|i| i.is_simd128()) {
            for (p, x) in acts.iter().enumerate() {
                let got = dot_q8_rows4(format, four, x, simd);
                for (r, row) in rows.iter().enumerate() {
                    let want = dot_q8(format, row, x, Isa::Scalar);
                    assert_eq!(
                        got[r].to_bits(),
                        want.to_bits(),
                        "{format} {simd:?} pattern {p} row {r}: {} vs {want}",
                        got[r]
                    );
                }
            }
        }
    }
}
