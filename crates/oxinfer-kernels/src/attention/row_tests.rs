//! A row's output does not depend on the rows it runs with: every row of a many-row call
//! (prefill, speculative verify) equals, bit for bit, a one-row call at its position (decode)
//! and the same row in a prompt cut into two chunks, for every storage type, with windows
//! (plain and ring layouts), soft caps and GQA, on every instruction set the CPU has. Keys
//! span several tiles and segments, so the decode calls take the split (flash-decoding) path
//! and the long calls the per-block one.

use super::kv_tests::{store, view};
use super::tests::values;
use super::*;
use proptest::prelude::*;

/// Rows `p` of `x` (`[n, width]`) for positions `n - ring .. n` in a ring of `ring` rows
/// (position `p` in row `p % ring`), NaN where no position lies yet.
fn to_ring(x: &[f32], width: usize, ring: usize) -> Vec<f32> {
    let n = x.len() / width;
    let mut out = vec![f32::NAN; ring.min(n) * width];
    for p in n.saturating_sub(ring)..n {
        let r = p % ring;
        out[r * width..(r + 1) * width].copy_from_slice(&x[p * width..(p + 1) * width]);
    }
    out
}

fn check(ty: KvType, t: usize, pos0: usize, cut: usize, s: AttnShape, seed: u64) {
    let (q_row, kv_row) = (s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim);
    let n_keys = pos0 + t;
    let q = values(t * q_row, seed, 2.0);
    let (k, v) = (
        values(n_keys * kv_row, seed + 1, 2.0),
        values(n_keys * kv_row, seed + 2, 1.0),
    );
    // One call over `keys` positions of k and v (a ring of `ring` rows when non-zero) for
    // queries `i0 .. i1`.
    let run = |isa, (i0, i1): (usize, usize), ring: usize| {
        let keys = pos0 + i1;
        let (mut kx, mut vx) = (k[..keys * kv_row].to_vec(), v[..keys * kv_row].to_vec());
        if ring > 0 {
            (kx, vx) = (to_ring(&kx, kv_row, ring), to_ring(&vx, kv_row, ring));
        }
        let (kb, vb) = (store(ty, &kx, kv_row), store(ty, &vx, kv_row));
        let mut out = vec![f32::NAN; (i1 - i0) * q_row];
        let qs = &q[i0 * q_row..i1 * q_row];
        let kv = (view(ty, &kb, &kx), view(ty, &vb, &vx));
        attention_kv_isa(qs, kv, i1 - i0, pos0 + i0, ring, &s, &mut out, isa);
        out
    };
    let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for isa in crate::dispatch::available_isas() {
        let all = run(isa, (0, t), 0);
        let mut chunks = run(isa, (0, cut), 0);
        chunks.extend(run(isa, (cut, t), 0));
        assert_eq!(bits(&chunks), bits(&all), "{ty} {isa:?} chunks at {cut}");
        for i in 0..t {
            let want = bits(&all[i * q_row..(i + 1) * q_row]);
            let one = run(isa, (i, i + 1), 0);
            assert_eq!(
                bits(&one),
                want,
                "{ty} {isa:?} t {t} pos0 {pos0} row {i} {s:?}"
            );
            if let Some(w) = s.window {
                // The tightest ring a decode step may use: the window.
                let one = run(isa, (i, i + 1), w);
                assert_eq!(bits(&one), want, "{ty} {isa:?} ring {w} row {i} {s:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn rows_alone_match_rows_together(
        ty in prop::sample::select(KvType::ALL.to_vec()),
        t in 1usize..40,
        pos0 in 0usize..700,
        cut in 0usize..40,
        kv in 1usize..3,
        group in 1usize..4,
        hd in prop::sample::select(vec![8usize, 33, 64]),
        window in prop::option::of(1usize..300),
        softcap in prop::option::of(1.0f32..30.0),
        seed in 0u64..1000,
    ) {
        let s = AttnShape {
            n_heads: kv * group,
            n_kv_heads: kv,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window,
            softcap,
        };
        check(ty, t, pos0, cut.min(t), s, seed);
    }
}
