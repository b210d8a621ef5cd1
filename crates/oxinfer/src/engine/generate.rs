//! The generation loop shared by every front end: chunked prefill, one-token decode steps,
//! sampling, EOS and stop strings, streaming through a callback.

use super::sampler::{Sampler, SamplingParams};
use super::stop::StopMatcher;
use crate::arch::CausalLm;
use crate::error::{Error, Result};
use crate::nn::KvCache;
use crate::tokenizer::Tokenizer;
use std::time::{Duration, Instant};

/// Default number of prompt tokens run per forward pass.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// What to generate and when to stop.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Most tokens to generate.
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Generation ends when the text contains one of these (which is not returned).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Prompt tokens per forward pass.
    pub prefill_chunk: usize,
    /// Return the logits of every prompt position in [`Generation::prompt_logits`].
    pub keep_prompt_logits: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: 256,
            sampling: SamplingParams::default(),
            stop: Vec::new(),
            ignore_eos: false,
            prefill_chunk: DEFAULT_PREFILL_CHUNK,
            keep_prompt_logits: false,
        }
    }
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced an end-of-generation token.
    Eos,
    /// A stop string appeared.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

impl StopReason {
    /// OpenAI's `finish_reason` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Eos | StopReason::StopString | StopReason::Cancelled => "stop",
            StopReason::MaxTokens | StopReason::ContextFull => "length",
        }
    }
}

/// One generated token as streamed to the caller.
#[derive(Clone, Debug)]
pub struct TokenEvent<'a> {
    pub id: u32,
    /// Text released by this token (may be empty while a UTF-8 character or a possible stop
    /// string is incomplete).
    pub text: &'a str,
}

/// Timings of a generation, for the stats line.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    pub prompt_tokens: usize,
    pub prompt_time: Duration,
    pub generated_tokens: usize,
    pub generation_time: Duration,
}

impl Timings {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        self.prompt_tokens as f64 / self.prompt_time.as_secs_f64().max(1e-9)
    }
    /// Generated tokens per second (the first token's step counts as prompt time).
    pub fn generation_tps(&self) -> f64 {
        self.generated_tokens as f64 / self.generation_time.as_secs_f64().max(1e-9)
    }
}

/// Result of a generation.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Generated token ids (the EOS token, if any, is included).
    pub tokens: Vec<u32>,
    /// Generated text, without stop strings and end-of-generation tokens.
    pub text: String,
    pub stop_reason: StopReason,
    pub timings: Timings,
    /// `[n_prompt, vocab]` logits of the prompt positions, when asked for.
    pub prompt_logits: Option<Vec<f32>>,
}

/// Runs `tokens` through the model in chunks of `chunk`. Returns the logits of every position
/// (`[tokens.len(), vocab]`) when `all`, else of the last position only.
pub fn prefill(
    lm: &dyn CausalLm,
    cache: &mut KvCache,
    tokens: &[u32],
    chunk: usize,
    all: bool,
) -> Result<Vec<f32>> {
    let mut logits = Vec::new();
    for piece in tokens.chunks(chunk.max(1)) {
        let l = lm.forward(piece, cache, all)?;
        if all {
            logits.extend_from_slice(&l);
        } else {
            logits = l;
        }
    }
    Ok(logits)
}

/// Generates after `prompt` (token ids) continuing from whatever `cache` holds: the prompt is
/// appended at position `cache.len()`. `on_token` is called for every generated token; it
/// returns `false` to stop. Without a tokenizer, no text is produced (ids only).
pub fn generate(
    lm: &dyn CausalLm,
    tokenizer: Option<&Tokenizer>,
    cache: &mut KvCache,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(&TokenEvent) -> bool,
) -> Result<Generation> {
    opts.sampling.validate()?;
    if prompt.is_empty() {
        return Err(Error::Request("the prompt is empty".into()));
    }
    let capacity = cache.capacity();
    if cache.len() + prompt.len() > capacity {
        return Err(Error::Request(format!(
            "the prompt ({} tokens) exceeds the context ({} tokens) by {}",
            cache.len() + prompt.len(),
            capacity,
            cache.len() + prompt.len() - capacity
        )));
    }
    let mut history: Vec<u32> = prompt.to_vec();
    let mut sampler = Sampler::new(opts.sampling.clone());
    let mut stops = StopMatcher::new(&opts.stop);
    let mut stream = tokenizer.map(|t| t.stream());
    let eos: Vec<u32> = tokenizer.map(|t| t.eos_ids().to_vec()).unwrap_or_default();

    let t0 = Instant::now();
    let all = prefill(
        lm,
        cache,
        prompt,
        opts.prefill_chunk,
        opts.keep_prompt_logits,
    )?;
    let vocab = lm.config().vocab_size;
    let mut logits = all[all.len() - vocab..].to_vec();
    let prompt_logits = opts.keep_prompt_logits.then_some(all);
    let prompt_time = t0.elapsed();
    let t1 = Instant::now();

    let mut out = Generation {
        tokens: Vec::new(),
        text: String::new(),
        stop_reason: StopReason::MaxTokens,
        timings: Timings {
            prompt_tokens: prompt.len(),
            prompt_time,
            ..Default::default()
        },
        prompt_logits,
    };
    while out.tokens.len() < opts.max_tokens {
        let id = sampler.sample(&logits, &history);
        out.tokens.push(id);
        history.push(id);
        if !opts.ignore_eos && eos.contains(&id) {
            out.stop_reason = StopReason::Eos;
            break;
        }
        let piece = stream.as_mut().map(|s| s.push(id)).unwrap_or_default();
        let (text, stopped) = stops.push(&piece);
        out.text.push_str(&text);
        if !on_token(&TokenEvent { id, text: &text }) {
            out.stop_reason = StopReason::Cancelled;
            break;
        }
        if stopped {
            out.stop_reason = StopReason::StopString;
            break;
        }
        if out.tokens.len() == opts.max_tokens {
            break;
        }
        if cache.len() >= capacity {
            out.stop_reason = StopReason::ContextFull;
            break;
        }
        logits = lm.forward(&[id], cache, false)?;
    }
    if matches!(
        out.stop_reason,
        StopReason::MaxTokens | StopReason::ContextFull | StopReason::Eos
    ) {
        let mut tail = stream.as_mut().map(|s| s.finish()).unwrap_or_default();
        let (text, _) = stops.push(&tail);
        tail = text + &stops.finish();
        if !tail.is_empty() {
            out.text.push_str(&tail);
            on_token(&TokenEvent {
                id: *out.tokens.last().unwrap_or(&0),
                text: &tail,
            });
        }
    }
    out.timings.generated_tokens = out.tokens.len();
    out.timings.generation_time = t1.elapsed();
    Ok(out)
}
