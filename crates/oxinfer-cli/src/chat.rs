//! `oxinfer chat`: interactive multi-turn chat. The KV cache is kept between turns, so only
//! the new messages are run.

use crate::common::{ModelArgs, SamplingArgs};
use anyhow::{bail, Result};
use clap::Args;
use oxinfer::engine::thinking::{prompt_opens_think, TracePrinter};
use oxinfer::engine::GenerateOptions;
use oxinfer::ChatMessage;
use std::io::{BufRead, IsTerminal, Write};

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// System message.
    #[arg(long)]
    pub system: Option<String>,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 1024)]
    pub max_tokens: usize,
    /// Context length (default: the model's).
    #[arg(short = 'c', long)]
    pub ctx: Option<usize>,
    /// Let the model reason first (the chat template's `enable_thinking`); the trace (between
    /// `<think>` and `</think>`, or Gemma 4's `<|channel>thought` and `<channel|>`) is printed
    /// dimmed on a terminal (to stderr otherwise) and kept out of the history.
    #[arg(long)]
    pub think: bool,
}

pub fn run(a: ChatArgs) -> Result<()> {
    let model = a.model.load()?;
    if model.chat_template().is_none() {
        bail!("{}: the model has no chat template", model.path().display());
    }
    let mut session = model.session(a.ctx);
    let start: Vec<ChatMessage> = a
        .system
        .iter()
        .map(|s| ChatMessage::new("system", s))
        .collect();
    let mut messages = start.clone();
    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!(
            "chatting with {} — /clear forgets, /exit quits",
            model.path().display()
        );
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut params = a.sampling.params();
    loop {
        if interactive {
            eprint!("> ");
            let _ = std::io::stderr().flush();
        }
        let Some(line) = lines.next() else { break };
        let line = line?;
        let input = line.trim_end_matches(['\r', '\n']);
        match input.trim() {
            "" => continue,
            "/exit" | "/quit" => break,
            "/clear" => {
                messages = start.clone();
                session.clear();
                eprintln!("(history cleared)");
                continue;
            }
            _ => {}
        }
        messages.push(ChatMessage::new("user", input));
        let extra = serde_json::json!({ "enable_thinking": a.think });
        let rendered = model.render_chat(&messages, true, &extra)?;
        let prompt = model.tokenize(&rendered, model.adds_bos())?;
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
            ..GenerateOptions::default()
        };
        let stdout = std::io::stdout();
        let generated = session.generate(&prompt, &opts, |ev| {
            let _ = printer.write(ev.text, &mut stdout.lock(), &mut trace);
            true
        });
        match generated {
            Ok(_) => {}
            Err(e) => {
                messages.pop();
                eprintln!("error: {e}");
                continue;
            }
        };
        let _ = printer.finish(&mut stdout.lock(), &mut trace);
        println!();
        messages.push(ChatMessage::new("assistant", printer.answer.trim()));
        params.seed = params.seed.wrapping_add(1);
    }
    Ok(())
}
