//! `oxinfer chat`: interactive multi-turn chat. The KV cache is kept between turns, so only
//! the new messages are run. On a terminal the input line is edited with arrow keys and
//! history, a pasted block is one turn, and Ctrl-C cancels the reply being written.

use crate::common::{CtxArgs, ModelArgs, ModelPositional, SamplingArgs};
use crate::line_input::{LineInput, Read};
use anyhow::{bail, Result};
use clap::Args;
use oxinfer::engine::thinking::{prompt_opens_think, TracePrinter};
use oxinfer::engine::{GenerateOptions, StopReason};
use oxinfer::ChatMessage;
use std::io::{IsTerminal, Write};

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub positional: ModelPositional,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens per reply.
    #[arg(
        short = 'n',
        long,
        visible_alias = "n-predict",
        alias = "predict",
        default_value_t = 1024
    )]
    pub max_tokens: usize,
    #[command(flatten)]
    pub ctx: CtxArgs,
    #[command(flatten)]
    pub kv: crate::kv_args::KvArgs,
    #[command(flatten)]
    pub spec: crate::decode_args::SpecArgs,
    /// Let the model reason first (the chat template's `enable_thinking`); the trace (between
    /// `<think>` and `</think>`, or Gemma 4's `<|channel>thought` and `<channel|>`) is printed
    /// dimmed on a terminal (to stderr otherwise) and kept out of the history.
    #[arg(long)]
    pub think: bool,
    /// When the conversation outgrows the context, stop with an error instead of dropping
    /// the oldest turns after the system prompt.
    #[arg(long)]
    pub no_context_shift: bool,
    #[command(flatten)]
    pub media: crate::media_args::MediaArgs,
}

/// Why a model without a chat template cannot chat, and what to do instead.
fn cannot_chat(name: &str) -> String {
    format!(
        "{name} is a base model (no chat template), so it cannot chat; complete text with it \
         (oxinfer run -m {name} \"Once upon a time\") or chat with an instruct model \
         (oxinfer chat -m {})",
        oxinfer::hub::DEFAULT_MODEL
    )
}

pub fn run(a: ChatArgs) -> Result<()> {
    let model_args = a.positional.merge_into(a.model)?;
    // A known base model is refused before it is downloaded.
    if let Some(m) = model_args
        .model
        .as_deref()
        .and_then(oxinfer::hub::find_model)
    {
        if !m.chat {
            bail!(cannot_chat(m.name));
        }
    }
    let (model, defaults) = model_args.load_with_defaults()?;
    let mut model = a.kv.apply(model)?;
    if model.chat_template().is_none() {
        bail!(cannot_chat(&crate::run::model_name(&model)));
    }
    let draft = a.spec.load_draft(&model_args, &mut model)?;
    let mut session = model.session(a.ctx.or_model_default(&defaults));
    if let Some(d) = &draft {
        session.set_draft(d)?;
    }
    let start: Vec<ChatMessage> = a
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s))
        .collect();
    let mut messages = start.clone();
    let mut input = LineInput::new();
    let interactive = input.interactive();
    if interactive {
        eprintln!(
            "chatting with {} — Ctrl-C stops a reply, /clear forgets, /exit or Ctrl-D quits",
            crate::run::model_name(&model)
        );
    }
    // Only a person at a terminal gets Ctrl-C = "stop the reply"; a pipe keeps the default.
    if matches!(input, LineInput::Editor(_)) {
        crate::interrupt::catch();
    }
    let mut params = a.sampling.params_over(&defaults);
    let mut media = crate::media_args::ChatMedia::new(a.media.video_fps);
    for (kind, path) in a.media.inputs() {
        media.attach(&model, kind, &path)?;
    }
    loop {
        let line = match input.read("> ")? {
            Read::Line(l) => l,
            Read::Interrupted => {
                eprintln!("(Ctrl-D or /exit quits)");
                continue;
            }
            Read::End => break,
        };
        let input_text = line.trim_end_matches(['\r', '\n']);
        match input_text.trim() {
            "" => continue,
            "/exit" | "/quit" | "/bye" => break,
            "/clear" => {
                messages = start.clone();
                session.clear();
                media.clear();
                eprintln!("(history cleared)");
                continue;
            }
            t => match media.command(&model, t) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    eprintln!("error: {e:#}");
                    continue;
                }
            },
        }
        messages.push(media.user_message(input_text));
        let extra = serde_json::json!({ "enable_thinking": a.think });
        let mut rendered = String::new();
        let ctx = session.capacity();
        // Room for a reply: the reply limit, at most a quarter of the context.
        let room = a.max_tokens.min(ctx / 4).max(1);
        let fitted = crate::context_shift::fit(
            &mut messages,
            start.len(),
            ctx,
            room,
            !a.no_context_shift,
            |m| {
                rendered = model.render_chat(m, true, &extra)?;
                Ok(model.tokenize(&rendered, model.adds_bos())?)
            },
        );
        let prompt = match fitted {
            Ok((prompt, 0)) => prompt,
            Ok((prompt, dropped)) => {
                eprintln!("(context shift: dropped the {dropped} oldest messages)");
                prompt
            }
            Err(e) => {
                messages.pop();
                eprintln!("error: {e}");
                continue;
            }
        };
        // Images and audio expand their placeholders here, after the fit: the shift does not
        // count their soft tokens against the context.
        let (prompt, turn_media) = media.place(&model, prompt)?;
        let terminal = std::io::stdout().is_terminal();
        let mut printer = TracePrinter::new(prompt_opens_think(&rendered), terminal);
        let mut trace: Box<dyn Write> = if terminal {
            Box::new(std::io::stdout())
        } else {
            Box::new(std::io::stderr())
        };
        let opts = GenerateOptions {
            max_tokens: a.max_tokens,
            sampling: params.clone(),
            stop: defaults.stop.clone(),
            speculation: a.spec.speculation(),
            media: turn_media,
            ..GenerateOptions::default()
        };
        let stdout = std::io::stdout();
        crate::interrupt::take();
        let generated = session.generate(&prompt, &opts, |ev| {
            let _ = printer.write(ev.text, &mut stdout.lock(), &mut trace);
            !crate::interrupt::pending()
        });
        let g = match generated {
            Ok(g) => g,
            Err(e) => {
                messages.pop();
                media.drop_last_turn();
                eprintln!("error: {e}");
                continue;
            }
        };
        let _ = printer.finish(&mut stdout.lock(), &mut trace);
        println!();
        if g.stop_reason == StopReason::Cancelled || crate::interrupt::take() {
            // The question and the partial reply are forgotten; the next turn starts clean.
            messages.pop();
            media.drop_last_turn();
            eprintln!("(reply cancelled)");
            continue;
        }
        crate::run::note_stop(g.stop_reason, a.max_tokens);
        messages.push(ChatMessage::new("assistant", printer.answer.trim()));
        params.seed = params.seed.wrapping_add(1);
    }
    Ok(())
}
