//! The fused kernel against a plain softmax-per-row reference, on random shapes.

use super::*;
use proptest::prelude::*;

/// Full softmax per query row, f64 accumulation.
fn reference(q: &[f32], k: &[f32], v: &[f32], t: usize, pos0: usize, s: &AttnShape) -> Vec<f32> {
    let hd = s.head_dim;
    let (q_row, kv_row) = (s.n_heads * hd, s.n_kv_heads * hd);
    let group = s.n_heads / s.n_kv_heads;
    let mut out = vec![0f32; t * q_row];
    for h in 0..s.n_heads {
        let kvh = h / group;
        for i in 0..t {
            let pos = pos0 + i;
            let first = first_key(pos, s.window);
            let qi = &q[i * q_row + h * hd..][..hd];
            let scores: Vec<f64> = (first..=pos)
                .map(|j| {
                    let kj = &k[j * kv_row + kvh * hd..][..hd];
                    let d: f64 = qi.iter().zip(kj).map(|(a, b)| f64::from(a * b)).sum();
                    let mut y = d * f64::from(s.scale);
                    if let Some(cap) = s.softcap {
                        y = f64::from(cap) * (y / f64::from(cap)).tanh();
                    }
                    y
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            for (n, j) in (first..=pos).enumerate() {
                let vj = &v[j * kv_row + kvh * hd..][..hd];
                for d in 0..hd {
                    let o = &mut out[i * q_row + h * hd + d];
                    *o += (e[n] / sum * f64::from(vj[d])) as f32;
                }
            }
        }
    }
    out
}

pub(super) fn values(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
        })
        .collect()
}

fn check(t: usize, pos0: usize, s: AttnShape, seed: u64) {
    let n_keys = pos0 + t;
    let q = values(t * s.n_heads * s.head_dim, seed, 2.0);
    let k = values(n_keys * s.n_kv_heads * s.head_dim, seed + 1, 2.0);
    let v = values(n_keys * s.n_kv_heads * s.head_dim, seed + 2, 1.0);
    let want = reference(&q, &k, &v, t, pos0, &s);
    for isa in [Isa::Scalar, detected_isa()] {
        let mut got = vec![f32::NAN; want.len()];
        attention_isa(&q, &k, &v, t, pos0, 0, &s, &mut got, isa);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 2e-5 * (1.0 + w.abs()),
                "{isa:?} t {t} pos0 {pos0} {s:?}: [{i}] {g} vs {w}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn matches_reference(
        t in 1usize..70,
        pos0 in 0usize..90,
        kv in 1usize..4,
        group in 1usize..4,
        hd in prop::sample::select(vec![1usize, 7, 8, 16, 33, 64, 80]),
        window in prop::option::of(1usize..40),
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
        check(t, pos0, s, seed);
    }
}

/// Long prompt with a wide head: several query blocks and key tiles, window larger than a tile.
#[test]
fn long_prompt_wide_heads() {
    for window in [None, Some(100)] {
        let s = AttnShape {
            n_heads: 4,
            n_kv_heads: 1,
            head_dim: 256,
            scale: 0.0625,
            window,
            softcap: None,
        };
        check(300, 0, s, 7);
        check(1, 299, s, 8);
    }
}

/// Keys and values in a ring of `ring` rows (position p in row p % ring) give exactly the
/// output of the plain layout, for rings from the tightest (window − 1 + t) up.
fn check_ring(t: usize, pos0: usize, s: AttnShape, extra: usize, seed: u64) {
    let w = s.window.expect("a ring needs a window");
    let n_keys = pos0 + t;
    let kv_row = s.n_kv_heads * s.head_dim;
    let q = values(t * s.n_heads * s.head_dim, seed, 2.0);
    let k = values(n_keys * kv_row, seed + 1, 2.0);
    let v = values(n_keys * kv_row, seed + 2, 1.0);
    let ring = w - 1 + t + extra;
    let rows = ring.min(n_keys);
    let (mut rk, mut rv) = (vec![f32::NAN; rows * kv_row], vec![f32::NAN; rows * kv_row]);
    for p in n_keys.saturating_sub(ring)..n_keys {
        let r = p % ring;
        rk[r * kv_row..(r + 1) * kv_row].copy_from_slice(&k[p * kv_row..(p + 1) * kv_row]);
        rv[r * kv_row..(r + 1) * kv_row].copy_from_slice(&v[p * kv_row..(p + 1) * kv_row]);
    }
    for isa in [Isa::Scalar, detected_isa()] {
        let mut want = vec![0f32; t * s.n_heads * s.head_dim];
        attention_isa(&q, &k, &v, t, pos0, 0, &s, &mut want, isa);
        let mut got = vec![f32::NAN; want.len()];
        attention_isa(&q, &rk, &rv, t, pos0, ring, &s, &mut got, isa);
        assert_eq!(got, want, "{isa:?} t {t} pos0 {pos0} ring {ring} {s:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn ring_matches_plain_layout(
        t in 1usize..40,
        pos0 in 0usize..200,
        group in 1usize..3,
        hd in prop::sample::select(vec![1usize, 8, 33, 64]),
        window in 1usize..80,
        extra in prop::sample::select(vec![0usize, 1, 5]),
        seed in 0u64..1000,
    ) {
        let s = AttnShape {
            n_heads: 2 * group,
            n_kv_heads: 2,
            head_dim: hd,
            scale: 1.0 / (hd as f32).sqrt(),
            window: Some(window),
            softcap: None,
        };
        check_ring(t, pos0, s, extra, seed);
    }
}

/// A ring smaller than the window and the new queries need is refused.
#[test]
#[cfg_attr(
    panic = "abort",
    ignore = "catches a panic; panics abort on this target (wasm)"
)]
#[should_panic(expected = "ring of")]
fn ring_too_small_panics() {
    let s = AttnShape {
        n_heads: 1,
        n_kv_heads: 1,
        head_dim: 4,
        scale: 0.5,
        window: Some(8),
        softcap: None,
    };
    let (q, k) = (vec![0.5f32; 4 * 4], vec![0.5f32; 10 * 4]);
    let mut out = vec![0f32; 4 * 4];
    attention_ring(&q, &k, &k, 4, 20, 10, &s, &mut out);
}

/// Short buffers and shapes whose sizes overflow are refused before any task writes `out`
/// through its raw pointer (the sizes were unchecked products), on every instruction set.
#[test]
#[cfg_attr(
    panic = "abort",
    ignore = "catches a panic; panics abort on this target (wasm)"
)]
fn short_buffers_and_overflowing_shapes_panic() {
    use crate::test_util::panic_message;
    let s = AttnShape {
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 8,
        scale: 0.5,
        window: None,
        softcap: None,
    };
    let (q, kv) = (vec![0.5f32; 3 * 16], vec![0.5f32; 3 * 8]);
    for isa in crate::dispatch::available_isas() {
        let mut short = vec![0f32; 3 * 16 - 1];
        let m = panic_message(|| attention_isa(&q, &kv, &kv, 3, 0, 0, &s, &mut short, isa));
        assert!(m.contains("q/out too short"), "{isa:?}: {m}");
        let mut out = vec![0f32; 3 * 16];
        let m = panic_message(|| attention_isa(&q, &kv[..20], &kv, 3, 0, 0, &s, &mut out, isa));
        assert!(m.contains("k/v too short"), "{isa:?}: {m}");
        let huge = AttnShape {
            n_heads: 4,
            n_kv_heads: 4,
            head_dim: usize::MAX / 2,
            ..s
        };
        let m = panic_message(|| attention_isa(&q, &kv, &kv, 3, 0, 0, &huge, &mut out, isa));
        assert!(
            m.contains("attention shape overflows usize"),
            "{isa:?}: {m}"
        );
        let m = panic_message(|| attention_isa(&q, &kv, &kv, 3, usize::MAX, 0, &s, &mut out, isa));
        assert!(
            m.contains("attention positions overflow usize"),
            "{isa:?}: {m}"
        );
    }
}
