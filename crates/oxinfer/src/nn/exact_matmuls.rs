//! `OXINFER_EXACT_MATMULS`: a debug switch that runs chosen projections on the exact path (the
//! scalar reference matmul: f32 activations, dequantized weights) while everything else keeps
//! the default kernels, to find where the default kernels' distance from the exact result comes
//! from (`tools/ref/kernels_kl.py --env OXINFER_EXACT_MATMULS=...`).
//!
//! The value is a comma-separated list of substrings of tensor names (`token_embd` = a tied
//! output head, `output.weight`, `ffn_down`, `attn_`, `blk.3.`), or `all`; read once.

use std::sync::OnceLock;

/// The variable read by [`is_exact`].
pub const EXACT_MATMULS_VAR: &str = "OXINFER_EXACT_MATMULS";

/// Whether the projection whose weight tensor is called `name` runs on the exact path.
pub fn is_exact(name: &str) -> bool {
    static PATTERNS: OnceLock<Vec<String>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        std::env::var(EXACT_MATMULS_VAR)
            .map(|v| {
                v.split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    });
    patterns
        .iter()
        .any(|p| p == "all" || name.contains(p.as_str()))
}
