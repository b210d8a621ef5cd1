//! Pooling of an encoder's token states into one vector per text, as sentence-transformers'
//! `Pooling` module does (`1_Pooling/config.json`): every enabled mode's vector, concatenated
//! in the module's order (cls, max, mean, mean-sqrt-len, weighted-mean, last-token).

use std::path::Path;

use serde_json::Value;

use crate::error::LoadError;

/// One pooling mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// The first token's state (`[CLS]`).
    Cls,
    /// Per feature, the largest value over the tokens.
    Max,
    /// The mean over the tokens.
    Mean,
    /// The sum over the tokens divided by √(number of tokens).
    MeanSqrtLen,
    /// The mean weighted by position (token `i` has weight `i + 1`).
    WeightedMean,
    /// The last token's state.
    LastToken,
}

impl PoolMode {
    /// Every mode with its `1_Pooling/config.json` key, in sentence-transformers' output order.
    const KEYS: [(PoolMode, &'static str); 6] = [
        (PoolMode::Cls, "pooling_mode_cls_token"),
        (PoolMode::Max, "pooling_mode_max_tokens"),
        (PoolMode::Mean, "pooling_mode_mean_tokens"),
        (PoolMode::MeanSqrtLen, "pooling_mode_mean_sqrt_len_tokens"),
        (PoolMode::WeightedMean, "pooling_mode_weightedmean_tokens"),
        (PoolMode::LastToken, "pooling_mode_lasttoken"),
    ];

    /// The mode named as sentence-transformers' `pooling_mode` argument (`cls`, `max`, `mean`,
    /// `mean_sqrt_len_tokens`, `weightedmean`, `lasttoken`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "cls" => PoolMode::Cls,
            "max" => PoolMode::Max,
            "mean" => PoolMode::Mean,
            "mean_sqrt_len_tokens" | "mean_sqrt_len" => PoolMode::MeanSqrtLen,
            "weightedmean" => PoolMode::WeightedMean,
            "lasttoken" => PoolMode::LastToken,
            _ => return None,
        })
    }
}

/// The pooling modes of a model, applied in order and concatenated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pooling {
    /// Enabled modes (at least one).
    pub modes: Vec<PoolMode>,
}

impl Pooling {
    /// Reads `1_Pooling/config.json` (at `path`): the `pooling_mode_*` flags of
    /// sentence-transformers 2–5, or the `pooling_mode` name (or list of names) of version 6.
    /// `include_prompt: false` is refused (not implemented).
    pub fn from_json(path: &Path, v: &Value) -> Result<Self, LoadError> {
        let named = |n: &Value| {
            let name = n.as_str().unwrap_or_default();
            PoolMode::from_name(name).ok_or_else(|| {
                LoadError::field(path, format!("pooling_mode '{name}' is not supported"))
            })
        };
        let modes: Vec<PoolMode> = match v.get("pooling_mode") {
            Some(Value::Array(list)) => list.iter().map(named).collect::<Result<_, _>>()?,
            Some(n @ Value::String(_)) => vec![named(n)?],
            _ => PoolMode::KEYS
                .iter()
                .filter(|(_, key)| v.get(*key).and_then(Value::as_bool) == Some(true))
                .map(|&(m, _)| m)
                .collect(),
        };
        if modes.is_empty() {
            return Err(LoadError::field(path, "no pooling_mode_* is true"));
        }
        if v.get("include_prompt").and_then(Value::as_bool) == Some(false) {
            return Err(LoadError::field(
                path,
                "include_prompt: false (prompt tokens left out of pooling) is not supported",
            ));
        }
        Ok(Pooling { modes })
    }

    /// Output width for token states of width `dim`.
    pub fn out_dim(&self, dim: usize) -> usize {
        self.modes.len() * dim
    }

    /// The pooled vector of one text's token states `h` (`[t, dim]`, `t ≥ 1`).
    pub fn pool(&self, h: &[f32], dim: usize) -> Vec<f32> {
        let t = h.len() / dim;
        let rows = || h.chunks_exact(dim);
        let mut out = Vec::with_capacity(self.out_dim(dim));
        for mode in &self.modes {
            match mode {
                PoolMode::Cls => out.extend_from_slice(&h[..dim]),
                PoolMode::LastToken => out.extend_from_slice(&h[(t - 1) * dim..]),
                PoolMode::Max => {
                    let mut m = vec![f32::NEG_INFINITY; dim];
                    for r in rows() {
                        m.iter_mut().zip(r).for_each(|(a, &b)| *a = a.max(b));
                    }
                    out.extend(m);
                }
                PoolMode::Mean | PoolMode::MeanSqrtLen | PoolMode::WeightedMean => {
                    let weight = |i: usize| match mode {
                        PoolMode::WeightedMean => (i + 1) as f32,
                        _ => 1.0,
                    };
                    let mut sum = vec![0f32; dim];
                    for (i, r) in rows().enumerate() {
                        let w = weight(i);
                        sum.iter_mut().zip(r).for_each(|(a, &b)| *a += w * b);
                    }
                    let total: f32 = (0..t).map(weight).sum();
                    let div = match mode {
                        PoolMode::MeanSqrtLen => (t as f32).sqrt(),
                        _ => total,
                    };
                    out.extend(sum.iter().map(|s| s / div));
                }
            }
        }
        out
    }
}

/// Scales `v` to unit L2 norm (sentence-transformers' `Normalize`; a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_on_two_tokens() {
        let h = [1.0, -2.0, 3.0, 4.0];
        let p = |m| Pooling { modes: vec![m] }.pool(&h, 2);
        assert_eq!(p(PoolMode::Cls), vec![1.0, -2.0]);
        assert_eq!(p(PoolMode::LastToken), vec![3.0, 4.0]);
        assert_eq!(p(PoolMode::Max), vec![3.0, 4.0]);
        assert_eq!(p(PoolMode::Mean), vec![2.0, 1.0]);
        assert_eq!(p(PoolMode::WeightedMean), vec![7.0 / 3.0, 2.0]);
        let s = 2f32.sqrt();
        assert_eq!(p(PoolMode::MeanSqrtLen), vec![4.0 / s, 2.0 / s]);
    }
}
