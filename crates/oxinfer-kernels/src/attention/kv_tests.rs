//! Attention over keys/values stored in each [`KvType`] against the f32 kernel over the same
//! rows decoded by the scalar reference: decode (one query) and prefill (many), plain and ring
//! layouts, heads aligned to the 32-value blocks or not, on every instruction set the CPU has.

use super::tests::values;
use super::*;
use proptest::prelude::*;

/// `x` (`[rows, width]`) stored row by row in `ty`.
pub(super) fn store(ty: KvType, x: &[f32], width: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for row in x.chunks_exact(width) {
        ty.quantize_row(row, &mut out);
    }
    out
}

/// Runs one call with k and v stored in `tk` / `tv` and compares it with the f32 kernel over
/// the decoded rows (ring of `ring` rows when non-zero).
fn check((tk, tv): (KvType, KvType), t: usize, pos0: usize, ring: usize, s: AttnShape, seed: u64) {
    let kv_row = s.n_kv_heads * s.head_dim;
    let rows = if ring == 0 {
        pos0 + t
    } else {
        ring.min(pos0 + t)
    };
    let q = values(t * s.n_heads * s.head_dim, seed, 2.0);
    let k = values(rows * kv_row, seed + 1, 2.0);
    let v = values(rows * kv_row, seed + 2, 1.0);
    let (kb, vb) = (store(tk, &k, kv_row), store(tv, &v, kv_row));
    let (kv, vv) = (view(tk, &kb, &k), view(tv, &vb, &v));
    let (kd, vd) = (kv.to_f32(0..rows, kv_row), vv.to_f32(0..rows, kv_row));
    for isa in crate::dispatch::available_isas() {
        let mut want = vec![0f32; t * s.n_heads * s.head_dim];
        attention_isa(&q, &kd, &vd, t, pos0, ring, &s, &mut want, isa);
        let mut got = vec![f32::NAN; want.len()];
        attention_kv_isa(&q, (kv, vv), t, pos0, ring, &s, &mut got, isa);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "{tk}/{tv} {isa:?} t {t} pos0 {pos0} ring {ring} {s:?}: [{i}] {g} vs {w}"
            );
        }
    }
}

/// `x` as a view of type `ty` (its f32 rows, or `b`, the same rows stored in `ty`).
pub(super) fn view<'a>(ty: KvType, b: &'a [u8], x: &'a [f32]) -> KvView<'a> {
    match ty {
        KvType::F32 => KvView::F32(x),
        _ => KvView::Packed { ty, data: b },
    }
}

fn shape(kv: usize, group: usize, hd: usize, window: Option<usize>) -> AttnShape {
    AttnShape {
        n_heads: kv * group,
        n_kv_heads: kv,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
        window,
        softcap: None,
    }
}

/// One decode step and one prefill chunk per type (k and v of the same type), with heads
/// of 64 (two blocks), 16 (two heads per block) and 48 (heads across block boundaries, the row
/// padded to whole blocks).
#[test]
fn each_type_matches_f32_over_decoded_rows() {
    for ty in KvType::ALL {
        for hd in [64usize, 16, 48] {
            let s = shape(2, 3, hd, None);
            check((ty, ty), 1, 130, 0, s, 11);
            check((ty, ty), 37, 20, 0, s, 12);
        }
    }
}

/// Mixed types (q8_0 keys with f16 values, and the reverse) and a sliding ring.
#[test]
fn mixed_types_and_rings() {
    let pairs = [
        (KvType::Q8_0, KvType::F16),
        (KvType::F16, KvType::Q4_0),
        (KvType::Q4_0, KvType::Q8_0),
    ];
    for (i, pair) in pairs.into_iter().enumerate() {
        let s = shape(1, 4, 32, Some(24));
        check(pair, 1, 200, 24, s, 20 + i as u64);
        check(pair, 9, 90, 32, s, 30 + i as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn stored_types_match_f32(
        ty in prop::sample::select(KvType::ALL.to_vec()),
        t in 1usize..40,
        pos0 in 0usize..150,
        kv in 1usize..3,
        group in 1usize..3,
        hd in prop::sample::select(vec![8usize, 32, 40, 64]),
        window in prop::option::of(1usize..60),
        seed in 0u64..1000,
    ) {
        let s = shape(kv, group, hd, window);
        let ring = window.map_or(0, |w| w - 1 + t);
        check((ty, ty), t, pos0, ring, s, seed);
    }
}
