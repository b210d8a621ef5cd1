//! indicatif progress bars for fetching models, hidden when stderr is not a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;

/// Draws one bar per download or extraction step; prints the hub's remarks.
pub struct Bars {
    bar: Option<ProgressBar>,
    enabled: bool,
}

impl Bars {
    pub fn new() -> Self {
        Bars {
            bar: None,
            enabled: stderr_is_tty(),
        }
    }
}

impl oxinfer::hub::Progress for Bars {
    fn start(&mut self, what: &str, total: Option<u64>) {
        if !self.enabled {
            eprintln!("{what}");
            return;
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n).with_style(
                ProgressStyle::with_template(
                    "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            ),
            None => ProgressBar::new_spinner(),
        };
        bar.set_message(what.to_string());
        self.bar = Some(bar);
    }

    fn advance(&mut self, bytes: u64) {
        if let Some(b) = &self.bar {
            b.inc(bytes);
        }
    }

    fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }

    /// Remarks (the hub could not be reached and pip comes next, a cached file is refetched)
    /// go to stderr as they are, above a bar that is running.
    fn note(&mut self, message: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{message}")),
            None => eprintln!("{message}"),
        }
    }
}

/// Whether stderr is an interactive terminal (progress bars, colours).
pub fn stderr_is_tty() -> bool {
    std::io::stderr().is_terminal()
}
