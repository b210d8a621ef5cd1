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
    /// Whether the tokens of a prompt put before the text take part (`include_prompt`, default
    /// true). When false, an input's first [`Encoded::prompt_len`](super::Encoded::prompt_len)
    /// tokens are left out, as sentence-transformers masks them.
    pub include_prompt: bool,
}

impl Pooling {
    /// `modes`, prompt tokens included.
    pub fn new(modes: Vec<PoolMode>) -> Self {
        Pooling {
            modes,
            include_prompt: true,
        }
    }

    /// Reads `1_Pooling/config.json` (at `path`): the `pooling_mode_*` flags of
    /// sentence-transformers 2–5, or the `pooling_mode` name (or list of names) of version 6,
    /// and `include_prompt`.
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
        let include_prompt = match v.get("include_prompt") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                return Err(LoadError::field(
                    path,
                    format!("include_prompt {other} is not true or false"),
                ))
            }
        };
        Ok(Pooling {
            modes,
            include_prompt,
        })
    }

    /// Output width for token states of width `dim`.
    pub fn out_dim(&self, dim: usize) -> usize {
        self.modes.len() * dim
    }

    /// The pooled vector of one text's token states `h` (`[t, dim]`, `t ≥ 1`) whose first
    /// `prompt_len` tokens hold the prompt (special tokens before it included). Without
    /// [`include_prompt`](Self::include_prompt) those tokens are left out as
    /// sentence-transformers' mask leaves them out: `cls` takes the first token after them,
    /// the means count only the others (weighted-mean weights stay `position + 1`), and when no
    /// token is left the means and `last-token` give zeros, `cls` the first token and `max`
    /// −∞, as there.
    pub fn pool(&self, h: &[f32], dim: usize, prompt_len: usize) -> Vec<f32> {
        let t = h.len() / dim;
        let skip = if self.include_prompt {
            0
        } else {
            prompt_len.min(t)
        };
        let kept = || h.chunks_exact(dim).enumerate().skip(skip);
        let mut out = Vec::with_capacity(self.out_dim(dim));
        for mode in &self.modes {
            match mode {
                PoolMode::Cls => {
                    let first = if skip < t { skip } else { 0 };
                    out.extend_from_slice(&h[first * dim..(first + 1) * dim]);
                }
                PoolMode::LastToken if skip < t => out.extend_from_slice(&h[(t - 1) * dim..]),
                PoolMode::LastToken => out.extend(std::iter::repeat_n(0.0, dim)),
                PoolMode::Max => {
                    let mut m = vec![f32::NEG_INFINITY; dim];
                    for (_, r) in kept() {
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
                    let mut total = 0f32;
                    for (i, r) in kept() {
                        let w = weight(i);
                        total += w;
                        sum.iter_mut().zip(r).for_each(|(a, &b)| *a += w * b);
                    }
                    // sentence-transformers clamps the count at 1e-9: no token gives zeros.
                    let total = total.max(1e-9);
                    let div = match mode {
                        PoolMode::MeanSqrtLen => total.sqrt(),
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
        let p = |m| Pooling::new(vec![m]).pool(&h, 2, 1);
        assert_eq!(p(PoolMode::Cls), vec![1.0, -2.0]);
        assert_eq!(p(PoolMode::LastToken), vec![3.0, 4.0]);
        assert_eq!(p(PoolMode::Max), vec![3.0, 4.0]);
        assert_eq!(p(PoolMode::Mean), vec![2.0, 1.0]);
        assert_eq!(p(PoolMode::WeightedMean), vec![7.0 / 3.0, 2.0]);
        let s = 2f32.sqrt();
        assert_eq!(p(PoolMode::MeanSqrtLen), vec![4.0 / s, 2.0 / s]);
    }

    #[test]
    fn prompt_tokens_left_out_as_sentence_transformers_masks_them() {
        // Three tokens, the first two the prompt.
        let h = [1.0, -2.0, 3.0, 4.0, 5.0, -6.0];
        let pooling = |m| Pooling {
            modes: vec![m],
            include_prompt: false,
        };
        let p = |m, skip| pooling(m).pool(&h, 2, skip);
        assert_eq!(p(PoolMode::Cls, 2), vec![5.0, -6.0]);
        assert_eq!(p(PoolMode::Mean, 2), vec![5.0, -6.0]);
        assert_eq!(p(PoolMode::Max, 1), vec![5.0, 4.0]);
        assert_eq!(
            p(PoolMode::WeightedMean, 1),
            vec![(6.0 + 15.0) / 5.0, (8.0 - 18.0) / 5.0]
        );
        assert_eq!(p(PoolMode::LastToken, 2), vec![5.0, -6.0]);
        // Nothing left: zeros for the means and the last token, the first token for cls.
        assert_eq!(p(PoolMode::Mean, 3), vec![0.0, 0.0]);
        assert_eq!(p(PoolMode::LastToken, 5), vec![0.0, 0.0]);
        assert_eq!(p(PoolMode::Cls, 3), vec![1.0, -2.0]);
        assert_eq!(p(PoolMode::Max, 3), vec![f32::NEG_INFINITY; 2]);
    }
}
