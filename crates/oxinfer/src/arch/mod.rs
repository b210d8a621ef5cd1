//! Model families, each composed from the blocks in [`crate::nn`].
//!
//! Every family describes itself once as a [`Plan`] ([`CausalLm::plan`]); the installed backend
//! runs it when it implements every op, the CPU otherwise ([`run_plan`]). Several sequences,
//! each with its own KV cache, run in one pass so each weight matrix is read once for all of
//! them (continuous batching); [`CausalLm::forward`] is the one-sequence case.

pub mod bert;
pub mod diffusion;
pub mod gemma;
pub mod kv_typed;
pub mod llama;
pub mod mmproj;
pub mod modernbert;
pub mod multimodal;
pub mod names;
pub mod qwen35;
pub mod qwen_vision;

pub use crate::plan::SeqBatch;

use crate::config::{Arch, ConfigSource, ModelConfig};
use crate::error::{LoadError, Result};
use crate::loader::{Naming, TensorStore};
use crate::nn::{Embedding, KvCache, Linear};
use crate::plan::{self, Plan, RowScore};

/// A decoder-only language model.
pub trait CausalLm: Send + Sync {
    /// The model's configuration.
    fn config(&self) -> &ModelConfig;

    /// An empty KV cache for one sequence of at most `capacity` positions.
    fn new_cache(&self, capacity: usize) -> KvCache;

    /// The model's one description, which the CPU and every backend execute.
    fn plan(&self) -> Plan<'_>;

    /// The vision/audio towers, for a multimodal checkpoint that has them.
    fn media(&self) -> Option<&dyn multimodal::MediaTowers> {
        None
    }

    /// Takes the media towers of an mmproj file (llama.cpp's `--mmproj`) for a model loaded
    /// from GGUF, in place of any it has; an architecture without towers refuses it.
    fn attach_mmproj(&mut self, mm: &mmproj::Mmproj) -> std::result::Result<(), LoadError> {
        Err(LoadError::malformed(
            mm.path(),
            format!(
                "is an mmproj file ({}), but a {} model takes no media towers",
                mm.projector(),
                self.config().arch.name()
            ),
        ))
    }

    /// The model as a Gemma 4 text model, when it is one: what a Gemma 4 drafter
    /// ([`gemma::gemma4_assistant`]) reads of its target (embedding table, cache layout).
    fn as_gemma4(&self) -> Option<&gemma::gemma4::Gemma4> {
        None
    }

    /// Runs every sequence of `batch` (each `tokens` at positions `cache.len() ..`, appended to
    /// its cache) in one pass. Returns, per sequence, its logits `[n, vocab]`: of every new
    /// position when `all_logits`, else of the last one (`n = 1`).
    fn forward_batch(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>> {
        run_plan(&self.plan(), batch)
    }

    /// Runs every sequence of `batch` (each with `all_logits` off) as
    /// [`forward_batch`](Self::forward_batch) does and returns, per sequence, the index of the
    /// largest logit of its last position (the first on ties, as greedy sampling picks):
    /// reduced on the device when the backend can ([`run_plan_argmax`]), so the `vocab`-wide
    /// rows need not come back.
    fn forward_batch_argmax(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<u32>> {
        run_plan_argmax(&self.plan(), batch)
    }

    /// Runs every sequence of `batch` as [`forward_batch`](Self::forward_batch) does but returns
    /// the final-normed hidden state of every new position instead of logits, stacked:
    /// `[Σ tokens, hidden]` ([`run_plan_hidden`]; on the CPU).
    fn forward_hidden(&self, batch: &mut [SeqBatch<'_>]) -> Result<Vec<f32>> {
        run_plan_hidden(&self.plan(), batch)
    }

    /// One sequence: `tokens` at positions `cache.len() ..`, every new position scored against
    /// its target (`targets[i]` for position i, usually the next token): the log-probability and
    /// the most likely token ([`RowScore`]), reduced on the device when the backend can, so the
    /// `vocab`-wide logit rows need not come back ([`run_plan_scores`]).
    fn forward_scores(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        targets: &[u32],
    ) -> Result<Vec<RowScore>> {
        run_plan_scores(&self.plan(), tokens, cache, targets)
    }

    /// One sequence: `tokens` at positions `cache.len() ..`; logits of every new position when
    /// `all_logits`, else of the last one.
    fn forward(&self, tokens: &[u32], cache: &mut KvCache, all_logits: bool) -> Result<Vec<f32>> {
        let mut batch = [SeqBatch {
            tokens,
            cache,
            all_logits,
            media: None,
        }];
        Ok(self.forward_batch(&mut batch)?.pop().unwrap_or_default())
    }
}

/// Builds the model named by `cfg.arch` from `store`; `src` gives family-specific keys.
pub fn load(
    cfg: &ModelConfig,
    store: &dyn TensorStore,
    naming: Naming,
    src: &ConfigSource<'_>,
) -> Result<Box<dyn CausalLm>, LoadError> {
    Ok(match cfg.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 => {
            Box::new(llama::Llama::load(cfg, store, naming, src)?)
        }
        Arch::Qwen35 | Arch::Qwen35Moe => Box::new(qwen35::Qwen35::load(cfg, store, naming, src)?),
        Arch::Gemma3 => Box::new(gemma::gemma3::Gemma3::load(cfg, store, naming, src)?),
        Arch::Gemma4 => Box::new(gemma::gemma4::Gemma4::load(cfg, store, naming, src)?),
    })
}

/// Runs `plan` over `batch` (see [`CausalLm::forward_batch`]): on the installed backend when it
/// takes the whole plan, else on the CPU.
pub fn run_plan(plan: &Plan, batch: &mut [SeqBatch<'_>]) -> Result<Vec<Vec<f32>>> {
    let (ids, x, mut seqs) = embed_batch(plan, batch)?;
    if let Some(b) = crate::backend::active() {
        if let Some(r) = crate::backend::plan_run::run(b, plan, &ids, &x, &mut seqs) {
            return r;
        }
    }
    plan::cpu::forward(plan, &ids, x, &mut seqs)
}

/// Runs `plan` over `batch` as [`run_plan`] does and returns per sequence the argmax of its
/// last logit row ([`CausalLm::forward_batch_argmax`]): on the installed backend, reduced there
/// when it can ([`crate::backend::Backend::run_plan_scored`]), else from the logits on the host.
///
/// # Errors
/// A sequence asks for every position's logits, or the pass failed.
pub fn run_plan_argmax(plan: &Plan, batch: &mut [SeqBatch<'_>]) -> Result<Vec<u32>> {
    if batch.iter().any(|s| s.all_logits) {
        return Err(crate::error::Error::Request(
            "an argmax pass returns one row per sequence; a sequence asked for all logits".into(),
        ));
    }
    let (ids, x, mut seqs) = embed_batch(plan, batch)?;
    if let Some(b) = crate::backend::active() {
        // The scored pass computes each row's argmax; no target (past the vocabulary: logp is
        // −inf, so a device skips the row's log-sum).
        let targets = vec![u32::MAX; seqs.len()];
        let scored = crate::backend::plan_run::run_scored(b, plan, &ids, &x, &mut seqs, &targets);
        if let Some(r) = scored {
            return r.map(|rows| rows.iter().map(|s| s.argmax).collect());
        }
    }
    let vocab = plan.head.matrix().rows;
    let logits = plan::cpu::forward(plan, &ids, x, &mut seqs)?;
    Ok(logits
        .iter()
        .map(|l| crate::engine::sampler::argmax(&l[l.len() - vocab..]))
        .collect())
}

/// Runs `plan` over one sequence (`tokens` appended to `cache`) and scores every new position
/// against `targets` (one per token; see [`CausalLm::forward_scores`]): on the installed backend
/// when it takes the whole plan (reducing the rows there when it can), else on the CPU, scoring
/// the logits on the host.
pub fn run_plan_scores(
    plan: &Plan,
    tokens: &[u32],
    cache: &mut KvCache,
    targets: &[u32],
) -> Result<Vec<RowScore>> {
    if targets.len() != tokens.len() {
        return Err(crate::error::Error::Request(format!(
            "{} targets for {} tokens",
            targets.len(),
            tokens.len()
        )));
    }
    let mut batch = [SeqBatch {
        tokens,
        cache,
        all_logits: true,
        media: None,
    }];
    let (ids, x, mut seqs) = embed_batch(plan, &mut batch)?;
    if let Some(b) = crate::backend::active() {
        if let Some(r) = crate::backend::plan_run::run_scored(b, plan, &ids, &x, &mut seqs, targets)
        {
            return r;
        }
    }
    let logits = plan::cpu::forward(plan, &ids, x, &mut seqs)?.concat();
    Ok(RowScore::from_rows(
        &logits,
        plan.head.matrix().rows,
        targets,
    ))
}

/// Runs `plan` over `batch` on the CPU and returns, instead of logits, the hidden state of every
/// new row after the final norm (transformers' `last_hidden_state`), stacked in batch order:
/// `[Σ tokens, dim]`. The keys/values are appended to the caches, which are not advanced. What
/// decoder-based embedding models pool ([`crate::embed`]).
pub fn run_plan_hidden(plan: &Plan, batch: &mut [SeqBatch<'_>]) -> Result<Vec<f32>> {
    let (ids, x, mut seqs) = embed_batch(plan, batch)?;
    let h = plan::cpu::hidden(plan, &ids, x, &mut seqs)?;
    Ok(plan.final_norm.forward(&h))
}

/// Runs `plan` over `batch` on the CPU as [`run_plan`] does and returns per sequence its
/// logits and the final-normed hidden state of the same rows ([`plan::cpu::forward_with_hidden`]).
pub fn run_plan_with_hidden(
    plan: &Plan,
    batch: &mut [SeqBatch<'_>],
) -> Result<plan::cpu::LogitsAndHidden> {
    let (ids, x, mut seqs) = embed_batch(plan, batch)?;
    plan::cpu::forward_with_hidden(plan, &ids, x, &mut seqs)
}

/// The stacked token ids of `batch`, their embeddings (media rows substituted) `[t, dim]`, and
/// each sequence's rows.
fn embed_batch<'a>(
    plan: &Plan,
    batch: &'a mut [SeqBatch<'_>],
) -> Result<(Vec<u32>, Vec<f32>, Vec<plan::SeqRows<'a>>)> {
    let media = plan::media::collect(batch);
    let (mut ids, seqs) = plan::batch::layout(batch)?;
    plan::media::substitute_ids(&media, &mut ids);
    let mut x = plan.embed.forward(&ids)?;
    plan::media::overwrite_rows(&media, &mut x, plan.dim);
    Ok((ids, x, seqs))
}

/// The embedding table `embed` (`[vocab, dim]`, looked-up rows × `scale`) and the output head:
/// the checkpoint's own `head` when present and not `tie`d, else the embedding table.
pub fn embedding_and_head(
    store: &dyn TensorStore,
    embed: &str,
    head: &str,
    [vocab, dim]: [usize; 2],
    tie: bool,
    scale: f32,
) -> Result<(Embedding, Linear), LoadError> {
    let table = store.require_shape(embed, &[vocab, dim])?;
    let mut embedding = Embedding::new(table.clone(), scale)?;
    let head = match store.get(head) {
        Some(w) if !tie => Linear::from_view(w?, None)?,
        _ => Linear::from_view(table, None)?,
    };
    embedding.tie_to(&head);
    if head.n_out != vocab || head.n_in != dim {
        return Err(LoadError::tensor(
            store.path(),
            &head.weight().name,
            format!("shape {:?}, expected [{vocab}, {dim}]", head.weight().shape),
        ));
    }
    Ok((embedding, head))
}
