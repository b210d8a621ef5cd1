//! Debug switches that change the precision of chosen projections while everything else keeps
//! the default kernels, to find where the default kernels' distance from the exact result comes
//! from and what a fix would buy (`tools/ref/kernels_kl.py --env VAR=...`):
//!
//! - `OXINFER_EXACT_MATMULS`: those projections run on the exact path (the scalar reference
//!   matmul: f32 activations, dequantized weights);
//! - `OXINFER_TWO_TERM_MATMULS`: those projections take two-term int8 activations
//!   ([`oxinfer_kernels::two_term`]), as the output head always does.
//!
//! Each value is a comma-separated list of substrings of tensor names (`token_embd` = a tied
//! output head, `output.weight`, `ffn_down`, `attn_`, `blk.3.`), or `all`; read once.

use std::sync::OnceLock;

/// The variable read by [`is_exact`].
pub const EXACT_MATMULS_VAR: &str = "OXINFER_EXACT_MATMULS";
/// The variable read by [`is_two_term`].
pub const TWO_TERM_MATMULS_VAR: &str = "OXINFER_TWO_TERM_MATMULS";

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
