//! Gemma 4's drafter (transformers `gemma4_assistant`, `Gemma4AssistantForCausalLM`): a small
//! Gemma 4 text model whose every layer attends to a target Gemma 4's cached keys and values
//! (the target's last unshared sliding and full layers), drafting several tokens from one
//! position.
//!
//! One step at position `p` (the target has cached positions `0 .. p`, exclusive, and the token
//! at `p` is known): the input is `pre_projection(concat(target embedding of the token × √D, h))`
//! with `h` the target's final-normed hidden state at `p − 1` (`[D]`, D the target's width).
//! The layers are Gemma 4's ([`Gemma4`], the same plan) with the query rotated at `p`; full
//! layers see every cached key, sliding layers the last `window + 1`. After the final norm,
//! `post_projection` gives the next step's `h` (`[D]`) and the tied head (or, with
//! `use_ordered_embeddings`, the centroid-masked head) the logits; no soft-cap. The next step
//! feeds back the argmax token at the same position `p`.

use super::gemma4::Gemma4;
use crate::arch::CausalLm;
use crate::config::{read_config_json, ConfigSource, ModelConfig};
use crate::error::{Error, LoadError, Result};
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::TensorStore;
use crate::nn::{KvCache, Linear};
use crate::plan::{self, SeqBatch};
use std::path::Path;

/// The centroid-masked head (`use_ordered_embeddings`): the top `top_k` of `n` centroids
/// select `top_k · per` tokens whose head rows are scored; every other token gets the smallest
/// selected logit minus 1.
struct Centroids {
    proj: Linear,
    /// Token ids grouped by centroid: `[n_centroids, per]`.
    ordering: Vec<u32>,
    top_k: usize,
    per: usize,
}

/// A loaded Gemma 4 drafter.
pub struct Gemma4Drafter {
    text: Gemma4,
    /// `[d, 2·D]`.
    pre: Linear,
    /// `[D, d]`.
    post: Linear,
    centroids: Option<Centroids>,
    target_dim: usize,
}

/// One draft step: the drafter's logits `[vocab]` and the hidden state `[D]` the next step
/// reads in place of the target's.
pub struct DraftStep {
    pub logits: Vec<f32>,
    pub hidden: Vec<f32>,
}

impl Gemma4Drafter {
    /// Loads the drafter checkpoint folder `dir` (`config.json` with `model_type:
    /// gemma4_assistant`, `model.safetensors`) for `target`.
    ///
    /// # Errors
    /// The config or a tensor is missing or malformed, or the drafter does not fit the target
    /// (`backbone_hidden_size`, vocabulary, the layers' head dims and kv heads).
    pub fn load(dir: &Path, target: &Gemma4) -> Result<Self, LoadError> {
        let cfg_path = dir.join("config.json");
        let json = read_config_json(&cfg_path)?;
        let field = |what: String| LoadError::field(&cfg_path, what);
        if json.get("model_type").and_then(|v| v.as_str()) != Some("gemma4_assistant") {
            return Err(field("model_type must be 'gemma4_assistant'".into()));
        }
        let cfg = ModelConfig::from_config_value(&cfg_path, &json)?;
        let tcfg = target.config();
        let backbone = json
            .get("backbone_hidden_size")
            .and_then(|v| v.as_u64())
            .unwrap_or(1536) as usize;
        if backbone != tcfg.hidden_size {
            return Err(field(format!(
                "backbone_hidden_size is {backbone}, the target's hidden size {}",
                tcfg.hidden_size
            )));
        }
        if cfg.vocab_size != tcfg.vocab_size {
            return Err(field(format!(
                "vocab_size is {}, the target's {}",
                cfg.vocab_size, tcfg.vocab_size
            )));
        }
        let src = ConfigSource::Json {
            path: &cfg_path,
            json: &json,
        };
        let st = SafetensorsModel::open(dir)?;
        let text = Gemma4::load_drafter(&cfg, &st, &src, target.params())?;
        let d = cfg.hidden_size;
        let centroids = match json.get("use_ordered_embeddings").and_then(|v| v.as_bool()) {
            Some(true) => Some(load_centroids(&json, &cfg_path, &st, &cfg)?),
            _ => None,
        };
        Ok(Gemma4Drafter {
            text,
            pre: Linear::load(&st, "pre_projection.weight", d, 2 * backbone)?,
            post: Linear::load(&st, "post_projection.weight", backbone, d)?,
            centroids,
            target_dim: backbone,
        })
    }

    /// One draft step at position `cache.len()` of `target`'s cache: `token` is the token at
    /// that position and `hidden` (`[D]`) the target's final-normed hidden state of the
    /// position before (or the previous step's [`DraftStep::hidden`]). The cache is read, not
    /// changed. Runs on the CPU.
    ///
    /// # Errors
    /// The cache is empty, `hidden` has the wrong width, or the cache no longer holds a key
    /// the step reads (a sliding layer needs `window + 1` positions: give the target's cache
    /// [`KvCache::keep_rewind`] of at least 1, more under speculative decoding).
    pub fn step(
        &self,
        target: &Gemma4,
        cache: &mut KvCache,
        token: u32,
        hidden: &[f32],
    ) -> Result<DraftStep> {
        let p = cache.len();
        if p == 0 {
            return Err(Error::Request(
                "a drafter needs the target's cached keys".into(),
            ));
        }
        if hidden.len() != self.target_dim {
            return Err(Error::Request(format!(
                "a drafter step reads a hidden state of {} values, got {}",
                self.target_dim,
                hidden.len()
            )));
        }
        self.check_cache(cache, p)?;
        let mut x = target.embed_rows(&[token])?;
        x.extend_from_slice(hidden);
        let x = self.pre.forward(&x, 1);
        let plan = self.text.plan();
        let mut batch = [SeqBatch {
            tokens: &[token],
            cache,
            all_logits: false,
            media: None,
        }];
        let (ids, mut seqs) = plan::batch::layout(&mut batch)?;
        let h = plan::cpu::hidden(&plan, &ids, x, &mut seqs)?;
        let h = plan.final_norm.forward(&h);
        let logits = match &self.centroids {
            Some(c) => c.logits(&h, plan.head),
            None => plan::cpu::normed_logits(&plan, &h, 1),
        };
        Ok(DraftStep {
            logits,
            hidden: self.post.forward(&h, 1),
        })
    }

    /// Up to `n` tokens drafted greedily after `token` at position `cache.len()` (see
    /// [`Gemma4Drafter::step`]), each with its step's logits.
    ///
    /// # Errors
    /// As [`Gemma4Drafter::step`].
    pub fn draft(
        &self,
        target: &Gemma4,
        cache: &mut KvCache,
        token: u32,
        hidden: &[f32],
        n: usize,
    ) -> Result<Vec<(u32, Vec<f32>)>> {
        let mut out: Vec<(u32, Vec<f32>)> = Vec::with_capacity(n);
        let (mut token, mut hidden) = (token, hidden.to_vec());
        for _ in 0..n {
            let s = self.step(target, cache, token, &hidden)?;
            token = crate::engine::sampler::argmax(&s.logits);
            hidden = s.hidden;
            out.push((token, s.logits));
        }
        Ok(out)
    }

    /// Whether a step at position `cache.len()` can run on `cache` (it is not empty and still
    /// holds every key the step reads).
    pub fn can_step(&self, cache: &KvCache) -> bool {
        !cache.is_empty() && self.check_cache(cache, cache.len()).is_ok()
    }

    /// Checks that every target layer a drafter layer reads still holds the keys of its
    /// window at position `p`.
    fn check_cache(&self, cache: &KvCache, p: usize) -> Result<()> {
        let params = self.text.params();
        for (i, &j) in params.kv_source.iter().enumerate() {
            let l = cache
                .layers
                .get(j)
                .ok_or_else(|| Error::Request(format!("the target's cache has no layer {j}")))?;
            let Some(w) = l.window else { continue };
            // transformers: a drafter's sliding layer sees the last window + 1 keys.
            let first = p.saturating_sub(self.text.config().sliding_window.unwrap_or(w) + 1);
            let ring_ok = l.ring == 0 || l.ring >= p - first;
            if !ring_ok || l.start > first {
                return Err(Error::Request(format!(
                    "drafter layer {i} reads positions {first}..{p} of the target's layer {j}, \
                     whose cache keeps positions from {} in {} rows",
                    l.start, l.ring
                )));
            }
        }
        Ok(())
    }
}

impl Centroids {
    /// Logits `[vocab]` of one final-normed hidden row `h` through the head rows of the top
    /// centroids' tokens (transformers' `Gemma4AssistantMaskedEmbedder`).
    fn logits(&self, h: &[f32], head: &dyn crate::plan::ProjOp) -> Vec<f32> {
        let c = self.proj.forward(h, 1);
        let mut order: Vec<usize> = (0..c.len()).collect();
        // Largest first; ties keep the lower index.
        order.sort_by(|&a, &b| c[b].total_cmp(&c[a]).then(a.cmp(&b)));
        let vocab = self.ordering.len();
        let all = head.forward(h, 1);
        let picked: Vec<usize> = order[..self.top_k]
            .iter()
            .flat_map(|&k| self.ordering[k * self.per..(k + 1) * self.per].iter())
            .map(|&t| t as usize)
            .collect();
        let floor = picked.iter().map(|&t| all[t]).fold(f32::INFINITY, f32::min) - 1.0;
        let mut out = vec![floor; vocab];
        for &t in &picked {
            out[t] = all[t];
        }
        out
    }
}

/// The centroid head of a `use_ordered_embeddings` drafter: `masked_embedding.centroids`
/// `[num_centroids, d]` and `masked_embedding.token_ordering` (`[vocab]` integer ids, a
/// permutation).
fn load_centroids(
    json: &serde_json::Value,
    cfg_path: &Path,
    st: &SafetensorsModel,
    cfg: &ModelConfig,
) -> Result<Centroids, LoadError> {
    let int = |k: &str, default: u64| json.get(k).and_then(|v| v.as_u64()).unwrap_or(default);
    let n = int("num_centroids", 2048) as usize;
    let top_k = int("centroid_intermediate_top_k", 32) as usize;
    let vocab = cfg.vocab_size;
    if n == 0 || !vocab.is_multiple_of(n) || top_k == 0 || top_k > n {
        return Err(LoadError::field(
            cfg_path,
            format!(
                "num_centroids {n} must divide vocab_size {vocab}, and \
                 centroid_intermediate_top_k {top_k} lie in 1..={n}"
            ),
        ));
    }
    let name = "masked_embedding.token_ordering";
    let (file, e) = st
        .files()
        .iter()
        .find_map(|f| f.entries().get(name).map(|e| (f, e)))
        .ok_or_else(|| LoadError::tensor(st.path(), name, "missing"))?;
    let bytes = &file.mapped().bytes()[e.offset..e.offset + e.size];
    let ordering: Vec<u64> = match e.dtype.as_str() {
        "I64" | "U64" => bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
            .collect(),
        "I32" | "U32" => bytes
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64)
            .collect(),
        other => {
            return Err(LoadError::tensor(
                st.path(),
                name,
                format!("dtype {other}, expected an integer type"),
            ))
        }
    };
    let mut seen = vec![false; vocab];
    for &t in &ordering {
        match seen.get_mut(t as usize) {
            Some(s) if !*s => *s = true,
            _ => {
                return Err(LoadError::tensor(
                    st.path(),
                    name,
                    format!("is not a permutation of the {vocab} token ids (id {t})"),
                ))
            }
        }
    }
    if ordering.len() != vocab {
        return Err(LoadError::tensor(
            st.path(),
            name,
            format!("{} ids, expected {vocab}", ordering.len()),
        ));
    }
    Ok(Centroids {
        proj: Linear::load(st, "masked_embedding.centroids.weight", n, cfg.hidden_size)?,
        ordering: ordering.into_iter().map(|t| t as u32).collect(),
        top_k,
        per: vocab / n,
    })
}
