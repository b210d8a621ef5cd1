//! `oxinfer run`: one prompt in, generated text out (stdout), stats on stderr.

use crate::common::{read_text, CtxArgs, ModelArgs, SamplingArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::engine::thinking::{prompt_opens_think, TracePrinter};
use oxinfer::engine::{GenerateOptions, StopReason};
use oxinfer::ChatMessage;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// `[MODEL] [PROMPT...]`: the first word is the model when it names one (a model name or a
    /// path), the rest is the prompt (see docs/cli.md).
    #[arg(value_name = "WORDS")]
    pub words: Vec<String>,
    /// The prompt (default: the positional words, else read from stdin).
    #[arg(short = 'p', long)]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long = "file", conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// Feed the prompt as-is instead of through the chat template (BOS added if the model's
    /// metadata says so). A model without a chat template (a base model) always runs so.
    #[arg(long)]
    pub raw: bool,
    /// System message for the chat template.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens to generate.
    #[arg(
        short = 'n',
        long,
        visible_alias = "n-predict",
        alias = "predict",
        default_value_t = 512
    )]
    pub max_tokens: usize,
    /// Stop when this text appears (repeatable).
    #[arg(long)]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub ctx: CtxArgs,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
    #[command(flatten)]
    pub spec: crate::decode_args::SpecArgs,
    /// Print the rendered prompt (stderr) before generating.
    #[arg(long)]
    pub print_prompt: bool,
    /// Print generated token ids (one line, space-separated) instead of text.
    #[arg(long)]
    pub show_tokens: bool,
    /// Feed these token ids (comma-separated) instead of a prompt.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["prompt", "file", "system"])]
    pub tokens: Option<Vec<u32>>,
    /// Write the logits of every prompt position as a float32 .npy `[n_prompt, vocab]`.
    #[arg(long)]
    pub dump_logits: Option<PathBuf>,
    /// Let the model reason first (the chat template's `enable_thinking`); the trace (between
    /// `<think>` and `</think>`, or Gemma 4's `<|channel>thought` and `<channel|>`) is printed
    /// dimmed on a terminal (to stderr otherwise) and kept out of the answer.
    #[arg(long)]
    pub think: bool,
    /// After loading, write the weights (in the precision chosen with --quant) as a
    /// pre-quantized checkpoint in this folder, then run as usual.
    #[arg(long, value_name = "DIR")]
    pub save_quantized: Option<PathBuf>,
    #[command(flatten)]
    pub media: crate::media_args::MediaArgs,
}

pub fn run(mut a: RunArgs) -> Result<()> {
    let words = crate::positional::split(
        &a.words,
        a.model.model.is_some(),
        a.prompt.is_some() || a.file.is_some() || a.tokens.is_some(),
    )?;
    if words.model.is_some() {
        a.model.model = words.model;
    }
    // Read the user's input before the (possibly slow) model load, so a bad path fails fast.
    let text = match (&a.tokens, words.prompt.or(a.prompt.clone()), &a.file) {
        (Some(_), _, _) => None,
        (None, Some(p), _) => Some(p),
        (None, None, Some(f)) => Some(read_text(f)?),
        (None, None, None) => Some(read_stdin()?),
    };
    let (model, defaults) = a.model.load_with_defaults()?;
    let mut model = a.kv.apply(model)?;
    let draft = a.spec.load_draft(&a.model, &mut model)?;
    if let Some(dir) = &a.save_quantized {
        crate::quantize::save(&model, dir)?;
    }
    if !a.media.is_empty() {
        crate::media_args::towers(&model)?;
    }
    let mut in_think = false;
    let vocab = model.config().vocab_size;
    let prompt: Vec<u32> = match (&a.tokens, text) {
        (Some(ids), _) => {
            if let Some(bad) = ids.iter().find(|&&i| i as usize >= vocab) {
                bail!("--tokens: id {bad} is outside the vocabulary (size {vocab})");
            }
            ids.clone()
        }
        (None, Some(text)) => {
            let raw = a.raw || model.chat_template().is_none();
            if raw && !a.raw {
                eprintln!(
                    "note: {} has no chat template (a base model): continuing the prompt as raw \
                     text, as --raw does",
                    model_name(&model)
                );
            }
            if raw {
                model.tokenize(&text, model.adds_bos())?
            } else {
                let mut messages = Vec::new();
                if let Some(s) = &a.system {
                    messages.push(ChatMessage::new("system", s));
                }
                let kinds: Vec<_> = a.media.inputs().into_iter().map(|(k, _)| k).collect();
                messages.push(crate::media_args::user_message(&text, &kinds));
                let extra = serde_json::json!({ "enable_thinking": a.think });
                let rendered = model.render_chat(&messages, true, &extra)?;
                in_think = prompt_opens_think(&rendered);
                if a.print_prompt {
                    eprintln!("{rendered}");
                }
                model.tokenize(&rendered, model.adds_bos())?
            }
        }
        (None, None) => unreachable!("text is read whenever no ids are given"),
    };
    let raw = a.raw || model.chat_template().is_none();
    let (prompt, media) =
        crate::media_args::place(&model, &a.media, prompt, a.tokens.is_some(), raw)?;
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if a.print_prompt && (a.raw || model.chat_template().is_none()) {
        eprintln!(
            "{}",
            model
                .tokenizer()
                .map(|t| t.decode(&prompt))
                .unwrap_or_default()
        );
    }
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampling: a.sampling.params_over(&defaults),
        // The model's stop strings (Ollama's params) unless --stop is given.
        stop: if a.stop.is_empty() {
            defaults.stop.clone()
        } else {
            a.stop.clone()
        },
        keep_prompt_logits: a.dump_logits.is_some(),
        speculation: a.spec.speculation(),
        media,
        ..GenerateOptions::default()
    };
    let mut session = model.session(a.ctx.or_model_default(&defaults));
    if let Some(d) = &draft {
        session.set_draft(d)?;
    }
    let stdout = std::io::stdout();
    let show_tokens = a.show_tokens || model.tokenizer().is_none();
    let mut ids_out: Vec<String> = Vec::new();
    let terminal = stdout.is_terminal();
    let mut printer = TracePrinter::new(in_think, terminal);
    let mut trace: Box<dyn Write> = if terminal {
        Box::new(std::io::stdout())
    } else {
        Box::new(std::io::stderr())
    };
    let g = session.generate(&prompt, &opts, |ev| {
        if show_tokens {
            ids_out.push(ev.id.to_string());
        } else {
            let _ = printer.write(ev.text, &mut stdout.lock(), &mut trace);
        }
        true
    })?;
    if !show_tokens {
        let _ = printer.finish(&mut stdout.lock(), &mut trace);
    }
    if show_tokens {
        // Every generated id, the end-of-generation token included.
        let all: Vec<String> = g.tokens.iter().map(|t| t.to_string()).collect();
        println!("{}", all.join(" "));
    } else {
        println!();
    }
    if let (Some(path), Some(logits)) = (&a.dump_logits, &g.prompt_logits) {
        crate::npy::write_f32(path, &[prompt.len(), vocab], logits)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    note_stop(g.stop_reason, a.max_tokens);
    let t = g.timings;
    eprintln!(
        "load {:.2} s | prompt {} tokens, {:.1} tok/s | generation {} tokens, {:.1} tok/s{} | stop: {:?}",
        model.load_time().as_secs_f64(),
        t.prompt_tokens,
        t.prompt_tps(),
        t.generated_tokens,
        t.generation_tps(),
        crate::decode_args::draft_stats(&t),
        g.stop_reason
    );
    crate::common::print_profile();
    Ok(())
}

/// The prompt from stdin; on a terminal, first a hint, so `oxinfer run` does not wait silently.
fn read_stdin() -> Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        eprintln!(
            "reading the prompt from the terminal: end it with Ctrl-D (or pass it: oxinfer run \
             \"PROMPT\", or chat: oxinfer chat)"
        );
    }
    let mut s = String::new();
    stdin
        .lock()
        .read_to_string(&mut s)
        .context("reading the prompt from stdin")?;
    Ok(s)
}

/// The model's file name, for one-line messages.
pub fn model_name(model: &oxinfer::Model) -> String {
    let p = model.path();
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| p.display().to_string())
}

/// Says on stderr when a reply ended because of a limit rather than by itself.
pub fn note_stop(reason: StopReason, max_tokens: usize) {
    match reason {
        StopReason::MaxTokens => eprintln!(
            "note: the reply was cut at {max_tokens} tokens (--max-tokens); pass -n N for more"
        ),
        StopReason::ContextFull => {
            eprintln!("note: the reply was cut because the context is full; pass -c N for more")
        }
        _ => {}
    }
}
