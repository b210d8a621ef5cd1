//! Debug switches that change the precision of chosen projections while everything else keeps
//! the default kernels, to find where the default kernels' distance from the exact result comes
//! from and what a fix would buy (`tools/ref/kernels_kl.py --env VAR=...`):
//!
//! - `OXINFER_EXACT_MATMULS`: those projections run on the exact path (the scalar reference
//!   matmul: f32 activations, dequantized weights);
//! - `OXINFER_TWO_TERM_MATMULS`: those projections take two-term int8 activations
//!   ([`oxinfer_kernels::two_term`]), as the output head always does;
//! - `OXINFER_SIM_ACT_MATMULS`: those projections run on the exact path over activations
//!   rounded to int8 with one scale per `OXINFER_SIM_ACT_BLOCK` values (default 32): what a
//!   kernel with that activation block would give, to price a kernel change before writing it
//!   (`OXINFER_SIM_ACT_MSE=1`: least-squared-error scales; `OXINFER_SIM_ACT_POW2=E`: per-32
//!   scales that are the block's over a power of two up to `2^E`).
//!
//! Each value is a comma-separated list of substrings of tensor names (`token_embd` = a tied
//! output head, `output.weight`, `ffn_down`, `attn_`, `blk.3.`), or `all`; read once.

use std::sync::OnceLock;

/// The variable read by [`is_exact`].
pub const EXACT_MATMULS_VAR: &str = "OXINFER_EXACT_MATMULS";
/// The variable read by [`is_two_term`].
pub const TWO_TERM_MATMULS_VAR: &str = "OXINFER_TWO_TERM_MATMULS";

/// The variable read by [`sim_block`].
pub const SIM_ACT_MATMULS_VAR: &str = "OXINFER_SIM_ACT_MATMULS";

/// The patterns of a comma-separated list in `var` (empty when unset).
fn patterns(var: &str) -> Vec<String> {
    std::env::var(var)
        .map(|v| {
            v.split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

fn matches(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .any(|p| p == "all" || name.contains(p.as_str()))
}

/// Whether the projection whose weight tensor is called `name` runs on the exact path
/// (`OXINFER_EXACT_MATMULS`).
pub fn is_exact(name: &str) -> bool {
    static P: OnceLock<Vec<String>> = OnceLock::new();
    matches(P.get_or_init(|| patterns(EXACT_MATMULS_VAR)), name)
}

/// Whether the projection whose weight tensor is called `name` takes two-term activations
/// (`OXINFER_TWO_TERM_MATMULS`).
pub fn is_two_term(name: &str) -> bool {
    static P: OnceLock<Vec<String>> = OnceLock::new();
    matches(P.get_or_init(|| patterns(TWO_TERM_MATMULS_VAR)), name)
}

/// The activation block width to simulate for the projection whose weight tensor is called
/// `name` (`OXINFER_SIM_ACT_MATMULS`, width `OXINFER_SIM_ACT_BLOCK`), or `None`.
pub fn sim_block(name: &str) -> Option<usize> {
    static P: OnceLock<(Vec<String>, usize)> = OnceLock::new();
    let (p, w) = P.get_or_init(|| {
        let w = std::env::var("OXINFER_SIM_ACT_BLOCK")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(32);
        (patterns(SIM_ACT_MATMULS_VAR), w)
    });
    matches(p, name).then_some(*w)
}

/// `x` rounded to int8 in blocks of `block` values (one scale each: `max |x| / 127`, or with
/// `OXINFER_SIM_ACT_MSE=1` the scale among `max |x| / 127 · (1 − i / 100)`, `i < 20`, of least
/// squared error; with `OXINFER_SIM_ACT_POW2=E`, each 32 values' scale `2^-e` times the
/// block's, `e ≤ E` as large as keeps their quants within ±127) and back.
pub fn sim_round(x: &[f32], block: usize) -> Vec<f32> {
    static MSE: OnceLock<bool> = OnceLock::new();
    let mse = *MSE.get_or_init(|| std::env::var("OXINFER_SIM_ACT_MSE").is_ok_and(|v| v == "1"));
    static POW2: OnceLock<u32> = OnceLock::new();
    let pow2 = *POW2.get_or_init(|| {
        std::env::var("OXINFER_SIM_ACT_POW2")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    });
    round_blocks(x, block, mse, pow2)
}

/// [`sim_round`] with its options given.
fn round_blocks(x: &[f32], block: usize, mse: bool, pow2: u32) -> Vec<f32> {
    let round = |b: &[f32], d: f32| -> Vec<f32> {
        b.iter()
            .map(|v| (v / d).round().clamp(-127.0, 127.0) * d)
            .collect()
    };
    let mut out = Vec::with_capacity(x.len());
    for b in x.chunks(block) {
        let amax = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        if amax == 0.0 || !amax.is_finite() {
            out.extend_from_slice(b);
            continue;
        }
        if pow2 > 0 {
            // One scale for the block; each 32-wide part a power-of-two fraction of it.
            let d = amax / 127.0;
            for p in b.chunks(32) {
                let a = p.iter().fold(0f32, |m, v| m.max(v.abs()));
                let mut e = 0;
                while e < pow2 && a * (1u32 << (e + 1)) as f32 <= amax {
                    e += 1;
                }
                out.extend(round(p, d / (1u32 << e) as f32));
            }
            continue;
        }
        let mut best = round(b, amax / 127.0);
        if mse {
            let err = |r: &[f32]| -> f32 { r.iter().zip(b).map(|(a, v)| (a - v) * (a - v)).sum() };
            for i in 1..20 {
                let r = round(b, amax / 127.0 * (1.0 - i as f32 / 100.0));
                if err(&r) < err(&best) {
                    best = r;
                }
            }
        }
        out.extend(best);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{round_blocks, sim_round};

    #[test]
    fn sim_round_uses_one_scale_per_block() {
        // Block 0 holds a large value, block 1 only small ones: block 1 keeps its own fine step.
        let mut x = vec![0.01f32; 64];
        x[0] = 127.0;
        x[40] = 0.0127;
        let r = sim_round(&x, 32);
        assert_eq!(r[0], 127.0);
        assert_eq!(r[1], 0.0, "0.01 is under half of block 0's step (1.0)");
        for (a, v) in r[32..].iter().zip(&x[32..]) {
            assert!((a - v).abs() <= 0.0127 / 127.0 * 0.5 + 1e-9, "{a} vs {v}");
        }
        // One 64-wide block: the small values round to zero.
        assert!(sim_round(&x, 64)[32..].iter().all(|&v| v == 0.0));
        // Per-32 parts at a power-of-two fraction of the block's scale (at most 2^-3): block
        // 1's max is 1e4 times smaller, so it gets 1/8 of block 0's step, 0.125.
        let r = round_blocks(&x, 64, false, 3);
        assert_eq!(r[..32], sim_round(&x, 32)[..32]);
        assert!(r[32..].iter().all(|&v| v == 0.0));
        let mut y = x.clone();
        y[40] = 12.0;
        let r = round_blocks(&y, 64, false, 3);
        assert_eq!(r[40], 12.0, "max 12 < 127/8: step 1/8");
        assert_eq!(r[41], 0.0);
        let mut z = x.clone();
        z[40] = 40.0;
        assert_eq!(round_blocks(&z, 64, false, 3)[33], 0.0);
        assert_eq!(
            round_blocks(&z, 64, false, 3)[40],
            40.0,
            "40 ≤ 127/2: step 1/2"
        );
    }
}
