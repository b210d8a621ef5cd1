//! The packed GEMM against its scalar twin (bit for bit) and against the row-major kernels on
//! the unpacked weights (same integer sums, float order differs), on random shapes with ragged
//! row groups and token tiles.

use super::*;
use crate::dispatch::available_isas;
use proptest::prelude::*;

const FORMATS: [WeightFormat; 22] = [
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::Q4K,
    WeightFormat::Q5K,
    WeightFormat::Q6K,
    WeightFormat::Q3K,
    WeightFormat::Q2K,
    // Table formats: 4-bit indices into a 16-value table.
    WeightFormat::IQ4_NL,
    WeightFormat::MXFP4,
    WeightFormat::IQ4_XS,
    WeightFormat::IQ2_XXS,
    WeightFormat::IQ2_XS,
    WeightFormat::IQ2_S,
    WeightFormat::IQ3_XXS,
    WeightFormat::IQ3_S,
    WeightFormat::IQ1_S,
    WeightFormat::IQ1_M,
    WeightFormat::TQ1_0,
    WeightFormat::TQ2_0,
];

/// `rows` rows of `cols` weights of `format` from random bytes with sane f16 scales.
fn random_matrix(format: WeightFormat, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
    if WeightFormat::IQ.contains(&format) {
        // Scales wherever each IQ/TQ/MXFP4 layout keeps them: the row kernels' test rows.
        return crate::vecdot::tests::random_row(format, rows * cols, seed);
    }
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let bb = format.block_bytes();
    let n = rows * cols / format.block_size() * bb;
    let mut data: Vec<u8> = (0..n).map(|_| next() as u8).collect();
    let f16 = |v: f32| half::f16::from_f32(v).to_le_bytes();
    for blk in data.chunks_exact_mut(bb) {
        let a = f16(((next() % 1000) as f32 / 1000.0 - 0.5) * 0.2);
        let b = f16(((next() % 1000) as f32 / 1000.0 - 0.5) * 0.1);
        let mut put = |at: usize, v: [u8; 2]| blk[at..at + 2].copy_from_slice(&v);
        match format {
            WeightFormat::Q4_0 | WeightFormat::Q5_0 | WeightFormat::Q8_0 => put(0, a),
            WeightFormat::Q4_1 | WeightFormat::Q5_1 | WeightFormat::Q4K | WeightFormat::Q5K => {
                put(0, a);
                put(2, b);
            }
            WeightFormat::Q3K => put(108, a),
            WeightFormat::Q2K => {
                put(80, a);
                put(82, b);
            }
            _ => put(208, a),
        }
    }
    data
}

fn random_acts(n: usize, seed: u64) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let v = (i as u64 ^ seed).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
            (v % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn check(format: WeightFormat, rows: usize, blocks: usize, t: usize, seed: u64) {
    let cols = blocks * format.block_size();
    let data = random_matrix(format, rows, cols, seed);
    let w = WeightMatrix::new(format, &data, rows, cols).unwrap();
    let p = PackedMatrix::pack(&w).unwrap();
    let x = random_acts(t * cols, seed ^ 0xABCD);
    // The row-major kernels (scalar twins) on the original weights.
    let mut want = vec![0f32; t * rows];
    crate::fast::matmul_fast(&w, &x, t, &mut want, Isa::Scalar);
    let mut scalar = vec![0f32; t * rows];
    matmul_packed_isa(&p, &x, t, &mut scalar, Isa::Scalar);
    let scale = 1.0 + want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for (i, (a, b)) in scalar.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 2e-5 * scale,
            "{format} rows {rows} cols {cols} t {t}: packed scalar {a} vs row-major {b} at {i}"
        );
    }
    for isa in available_isas() {
        if isa.is_simd128() {
            // The SIMD128 kernels round the multiply-adds that the twin fuses (one extra
            // rounding of a term and of the running sum per block and term), a few ulps of
            // the sums' magnitude: within the bound of the packed vs row-major check above.
            let mut simd = vec![0f32; t * rows];
            matmul_packed_isa(&p, &x, t, &mut simd, isa);
            for (i, (a, b)) in simd.iter().zip(&scalar).enumerate() {
                assert!(
                    (a - b).abs() <= 2e-5 * scale,
                    "{format} rows {rows} cols {cols} t {t} {isa:?}: {a} vs scalar twin {b} at {i}"
                );
            }
            if isa == Isa::RelaxedSimd128 {
                // The relaxed integer sums are SIMD128's, and the float step is shared.
                let mut widen = vec![0f32; t * rows];
                matmul_packed_isa(&p, &x, t, &mut widen, Isa::Simd128);
                for (i, (a, b)) in simd.iter().zip(&widen).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        b.to_bits(),
                        "{format} rows {rows} cols {cols} t {t}: relaxed {a} vs SIMD128 {b} at {i}"
                    );
                }
            }
            continue;
        }
        if !isa.has_avx2() {
            continue;
        }
        let mut simd = vec![0f32; t * rows];
        matmul_packed_isa(&p, &x, t, &mut simd, isa);
        for (i, (a, b)) in simd.iter().zip(&scalar).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{format} rows {rows} cols {cols} t {t} {isa:?}: {a} vs scalar twin {b} at {i}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn packed_matches_twins(
        f in 0usize..FORMATS.len(),
        rows in 1usize..41,
        blocks in 1usize..4,
        t in 1usize..11,
        seed in any::<u64>(),
    ) {
        check(FORMATS[f], rows, blocks, t, seed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Products sharing one input in one region give each matrix's own product bit for bit,
    /// whether their formats round the activations alike (one rounding) or not (one call each).
    #[test]
    fn shared_products_match_one_call_each(
        fs in proptest::collection::vec(0usize..FORMATS.len(), 1..4),
        rows in proptest::collection::vec(1usize..41, 3),
        t in 1usize..7,
        seed in any::<u64>(),
    ) {
        let cols = 256; // whole blocks of every format
        let data: Vec<Vec<u8>> = fs
            .iter()
            .zip(&rows)
            .enumerate()
            .map(|(i, (&f, &r))| random_matrix(FORMATS[f], r, cols, seed ^ i as u64))
            .collect();
        let ws: Vec<PackedMatrix> = fs
            .iter()
            .zip(&rows)
            .zip(&data)
            .map(|((&f, &r), d)| {
                PackedMatrix::pack(&WeightMatrix::new(FORMATS[f], d, r, cols).unwrap()).unwrap()
            })
            .collect();
        let x = random_acts(t * cols, seed ^ 0x5EED);
        let refs: Vec<&PackedMatrix> = ws.iter().collect();
        let mut ys: Vec<Vec<f32>> = ws.iter().map(|w| vec![f32::NAN; t * w.rows()]).collect();
        let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
        matmul_packed_shared(&refs, &x, t, &mut outs);
        for (w, y) in ws.iter().zip(&ys) {
            let mut want = vec![0f32; t * w.rows()];
            matmul_packed(w, &x, t, &mut want);
            let same = y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            prop_assert!(same, "{}: shared product differs from its own call", w.format());
        }
    }
}

#[test]
fn token_blocks_and_many_groups() {
    // More tokens than one cache block (64), rows a ragged multiple of 8.
    for (i, f) in FORMATS.into_iter().enumerate() {
        check(f, 67, 2, 70, 11 + i as u64);
    }
}

#[test]
fn extreme_quants_do_not_overflow() {
    // Every quant at its maximum and activations at ±full scale: the i16 partial sums are at
    // their bound.
    for f in FORMATS {
        let (rows, cols) = (9, 2 * f.block_size());
        let mut data = random_matrix(f, rows, cols, 5);
        let bb = f.block_bytes();
        for blk in data.chunks_exact_mut(bb) {
            // Largest quant magnitudes: index 0 of the IQ4 table is -127, and IQ4_XS scale
            // code 0 is -32.
            let q = match f {
                WeightFormat::IQ4_NL => 2..18,
                WeightFormat::IQ4_XS => 2..136,
                WeightFormat::MXFP4 => 1..17,
                f if WeightFormat::IQ.contains(&f) => continue,
                WeightFormat::Q4_0 => 2..18,
                WeightFormat::Q4_1 => 4..20,
                WeightFormat::Q5_0 => 2..22,
                WeightFormat::Q5_1 => 4..24,
                WeightFormat::Q8_0 => 2..34,
                WeightFormat::Q4K => 4..144,
                WeightFormat::Q5K => 4..176,
                // Q3_K: no high bit and low bits 0 is quant -4; scale bits 0 are -32.
                WeightFormat::Q3K => 0..108,
                // Q2_K: scale and min 15, quants 3.
                WeightFormat::Q2K => 0..80,
                _ => 0..208,
            };
            let fill = match f {
                WeightFormat::Q8_0 => 0x81,
                WeightFormat::Q3K => 0x00,
                WeightFormat::IQ4_NL | WeightFormat::IQ4_XS => 0x00,
                WeightFormat::MXFP4 => 0xFF, // code 15: -12, the largest
                _ => 0xFF,
            };
            blk[q].fill(fill);
        }
        let w = WeightMatrix::new(f, &data, rows, cols).unwrap();
        let p = PackedMatrix::pack(&w).unwrap();
        for sign in [1.0f32, -1.0] {
            let t = 5;
            let x = vec![sign; t * cols];
            let mut want = vec![0f32; t * rows];
            crate::fast::matmul_fast(&w, &x, t, &mut want, Isa::Scalar);
            for isa in available_isas() {
                let mut got = vec![0f32; t * rows];
                matmul_packed_isa(&p, &x, t, &mut got, isa);
                let scale = 1.0 + want.iter().fold(0f32, |m, v| m.max(v.abs()));
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() <= 2e-5 * scale, "{f} {isa:?}: {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn unsupported_formats_are_not_packed() {
    let data = vec![0u8; WeightFormat::Q8K.row_bytes(256).unwrap()];
    let w = WeightMatrix::new(WeightFormat::Q8K, &data, 1, 256).unwrap();
    assert!(PackedMatrix::pack(&w).is_none());
    assert!(!packing_pays(WeightFormat::Q8K));
}

#[test]
fn memory_rule_packs_growing_formats_only_on_request() {
    for f in FORMATS {
        // The growth is the layouts' own sizes: a packed matrix of 8 rows against the file's.
        let rows = 8;
        let cols = f.block_size() * 2;
        let data = random_matrix(f, rows, cols, 7);
        let w = WeightMatrix::new(f, &data, rows, cols).unwrap();
        let p = PackedMatrix::pack(&w).unwrap();
        let growth = packed_growth(f).unwrap();
        assert_eq!(growth, p.size_bytes() as f64 / data.len() as f64, "{f}");
        assert!(packing_allowed(f, PackingMode::All), "{f}");
        assert!(!packing_allowed(f, PackingMode::Off), "{f}");
        let compact = packing_allowed(f, PackingMode::Compact);
        assert_eq!(compact, growth <= MAX_DEFAULT_GROWTH, "{f}: {growth}");
    }
    // What the rule is for: IQ4_XS (1.07x) and the K-quants stay packed by default; the
    // IQ1/IQ2 types people pick to fit a model in RAM (2-3x packed) do not.
    use WeightFormat::*;
    for f in [Q4_0, Q8_0, Q2K, Q3K, Q4K, Q6K, IQ4_NL, MXFP4, IQ4_XS] {
        assert!(packing_allowed(f, PackingMode::Compact), "{f}");
    }
    for f in [
        IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0,
    ] {
        assert!(!packing_allowed(f, PackingMode::Compact), "{f}");
    }
    for mode in [PackingMode::Off, PackingMode::Compact, PackingMode::All] {
        assert!(!packing_allowed(Q8K, mode));
    }
}

/// The whole-model rule: a few growing tensors among compact ones keep the model within
/// 1.25x (SmolLM2's IQ2_XS file: 27 IQ2_XS `ffn_down` among IQ4_NL / Q4_0 / Q8_0), a model
/// made of them does not; formats without a packed layout count once.
#[test]
fn memory_rule_over_a_whole_model() {
    use WeightFormat::*;
    let growth = packed_growth(IQ2_XS).unwrap();
    // IQ2_XS bytes b among 4-bit bytes a fit exactly while a + growth b <= 1.25 (a + b).
    let a = 1_000_000usize;
    let fits_up_to = (0.25 * a as f64 / (growth - MAX_DEFAULT_GROWTH)) as usize;
    assert!(model_fits_packed([(IQ4_NL, a), (IQ2_XS, fits_up_to)]));
    assert!(!model_fits_packed([
        (IQ4_NL, a),
        (IQ2_XS, fits_up_to + 1000)
    ]));
    assert!(!model_fits_packed([(IQ2_XS, a)]));
    assert!(model_fits_packed([(Q4K, a), (Q6K, a), (F32, a), (Q8K, a)]));
    assert!(model_fits_packed(std::iter::empty()));
    // A fitting model packs its growing formats where packing runs at all; one that does not
    // fit keeps them row-major (the default mode here: the tests do not set OXINFER_PACKED),
    // where IQ2_XS has packed kernels (not on SIMD128).
    if packing_pays(Q4_0) && crate::dispatch::packing_mode() == PackingMode::Compact {
        let iq2 = packed_kernels(IQ2_XS, crate::dispatch::detected_isa());
        assert_eq!(packing_pays_in(IQ2_XS, true), iq2);
        assert!(!packing_pays_in(IQ2_XS, false));
        assert!(!packing_pays_in(Q8K, true));
        assert!(packing_pays_in(Q4_0, false));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A row read back from the packed copy has the same bits as the row-major dequantizer
    /// gives on the original bytes (tied embeddings read rows from the packed head).
    #[test]
    fn packed_rows_dequantize_like_the_original(
        f in 0usize..FORMATS.len(),
        rows in 1usize..20,
        blocks in 1usize..4,
        seed in any::<u64>(),
    ) {
        let format = FORMATS[f];
        let cols = blocks * format.block_size();
        let data = random_matrix(format, rows, cols, seed);
        let w = WeightMatrix::new(format, &data, rows, cols).unwrap();
        let p = PackedMatrix::pack(&w).unwrap();
        let (mut want, mut got) = (vec![0f32; cols], vec![0f32; cols]);
        for r in 0..rows {
            w.dequantize_row_into(r, &mut want);
            p.dequantize_row_into(r, &mut got);
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                prop_assert_eq!(a.to_bits(), b.to_bits(), "{} row {} col {}: {} vs {}", format, r, i, a, b);
            }
        }
    }
}

#[test]
fn decode_pairs_of_groups() {
    // One token (the two-group decode kernels where the CPU has them): group counts odd and
    // even, a ragged last group, several tasks.
    for f in [WeightFormat::Q4K, WeightFormat::Q6K, WeightFormat::Q5K] {
        for (i, rows) in [8, 9, 16, 17, 24, 67, 200, 521].into_iter().enumerate() {
            check(f, rows, 3, 1, 97 + i as u64);
        }
    }
}

/// Every value the grids of the 256-weight table formats can decode to (each grid byte with
/// either sign; IQ1: `8 g ± 1`) has an index in the format's packed table, so packing never
/// meets a quant it cannot store (random blocks reach only some grid entries).
#[test]
fn every_grid_value_has_a_table_index() {
    use crate::dequant::iq_grids::*;
    use pack::t4_table;
    let has = |f: WeightFormat, v: i32| t4_table(f).unwrap().0.iter().any(|&t| i32::from(t) == v);
    let bytes64 = |g: &[u64]| -> Vec<i32> {
        g.iter()
            .flat_map(|e| e.to_le_bytes())
            .map(i32::from)
            .collect()
    };
    let bytes32 = |g: &[u32]| -> Vec<i32> {
        g.iter()
            .flat_map(|e| e.to_le_bytes())
            .map(i32::from)
            .collect()
    };
    let signed = [
        (WeightFormat::IQ2_XXS, bytes64(&IQ2XXS_GRID)),
        (WeightFormat::IQ2_XS, bytes64(&IQ2XS_GRID)),
        (WeightFormat::IQ2_S, bytes64(&IQ2S_GRID)),
        (WeightFormat::IQ3_XXS, bytes32(&IQ3XXS_GRID)),
        (WeightFormat::IQ3_S, bytes32(&IQ3S_GRID)),
    ];
    for (f, values) in signed {
        for v in values {
            assert!(has(f, v) && has(f, -v), "{f}: grid value {v}");
        }
    }
    for e in IQ1S_GRID.iter().flat_map(|e| e.to_le_bytes()) {
        let g = i32::from(e as i8);
        for f in [WeightFormat::IQ1_S, WeightFormat::IQ1_M] {
            assert!(
                has(f, 8 * g + 1) && has(f, 8 * g - 1),
                "{f}: grid value {g}"
            );
        }
    }
    for v in KVALUES_IQ4NL {
        assert!(has(WeightFormat::IQ4_XS, i32::from(v)));
    }
    for f in [WeightFormat::TQ1_0, WeightFormat::TQ2_0] {
        assert!((-1..=2).all(|v| has(f, v)), "{f}");
    }
}
