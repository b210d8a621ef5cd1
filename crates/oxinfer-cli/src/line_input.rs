//! Where `chat` reads the user's turns: a line editor on a terminal (arrow keys, history,
//! multi-line paste), plain lines from a pipe or file.

use anyhow::{Context, Result};
use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;
use std::io::{BufRead, IsTerminal, Write};

/// The source of chat input.
pub enum LineInput {
    /// A terminal on stdin and stdout: rustyline, with in-memory history and bracketed paste
    /// (a pasted block of several lines is one turn).
    Editor(Box<DefaultEditor>),
    /// Anything else: one turn per line, read as is.
    Lines(std::io::Lines<std::io::StdinLock<'static>>),
}

/// One read from [`LineInput::read`].
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// A line (or pasted block) the user entered.
    Line(String),
    /// Ctrl-C at the prompt: the line was dropped; ask again.
    Interrupted,
    /// End of input: Ctrl-D on an empty line, or the end of the pipe.
    End,
}

impl LineInput {
    /// The line editor when stdin and stdout are terminals (falling back to plain lines when
    /// the terminal cannot be driven), plain lines otherwise.
    pub fn new() -> Self {
        let stdin = std::io::stdin();
        if stdin.is_terminal() && std::io::stdout().is_terminal() {
            if let Ok(editor) = DefaultEditor::new() {
                return LineInput::Editor(Box::new(editor));
            }
        }
        LineInput::Lines(stdin.lock().lines())
    }

    /// Whether a person types the input (prompts and hints are shown then).
    pub fn interactive(&self) -> bool {
        match self {
            LineInput::Editor(_) => true,
            LineInput::Lines(_) => std::io::stdin().is_terminal(),
        }
    }

    /// Reads the next turn, showing `prompt` first when interactive.
    pub fn read(&mut self, prompt: &str) -> Result<Read> {
        match self {
            LineInput::Editor(editor) => match editor.readline(prompt) {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    Ok(Read::Line(line))
                }
                Err(ReadlineError::Interrupted) => Ok(Read::Interrupted),
                Err(ReadlineError::Eof) => Ok(Read::End),
                Err(e) => Err(e).context("reading the terminal"),
            },
            LineInput::Lines(lines) => {
                if std::io::stdin().is_terminal() {
                    eprint!("{prompt}");
                    let _ = std::io::stderr().flush();
                }
                match lines.next() {
                    None => Ok(Read::End),
                    Some(line) => Ok(Read::Line(line.context("reading stdin")?)),
                }
            }
        }
    }
}
