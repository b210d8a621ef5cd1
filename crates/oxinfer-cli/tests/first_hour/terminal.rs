//! The binary on a real terminal (a tmux pane): the stdin hint of `run`, and `chat`'s line
//! editing (history on the up arrow) and Ctrl-C, which stops a reply without quitting.

use std::process::Command;
use std::time::{Duration, Instant};

/// A detached tmux session on its own server socket, killed when dropped.
struct Pane {
    socket: String,
}

impl Pane {
    /// Starts `command` (a shell line) in a new 200×50 pane; `None` (after a `skipped:` line)
    /// when tmux is not installed.
    fn start(tag: &str, command: &str) -> Option<Pane> {
        if Command::new("tmux").arg("-V").output().is_err() {
            crate::common::skip(tag, "tmux is not installed", false);
            return None;
        }
        let pane = Pane {
            socket: format!("oxinfer-test-{}-{tag}", std::process::id()),
        };
        let ok = pane
            .tmux(&["new-session", "-d", "-x", "200", "-y", "50", command])
            .status
            .success();
        assert!(ok, "tmux new-session failed");
        pane.tmux(&["set-option", "-g", "remain-on-exit", "on"]);
        Some(pane)
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The pane's text, with the scrollback.
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-S", "-200"]).stdout)
            .into_owned()
    }

    /// Sends tmux key names (`Enter`, `Up`, `C-c`) or literal text.
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Waits (up to `secs`) until `done` holds for the pane's text; panics with the text
    /// otherwise.
    fn wait_for(&self, what: &str, secs: u64, done: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let text = self.text();
            if done(&text) {
                return text;
            }
            assert!(
                start.elapsed() < Duration::from_secs(secs),
                "timed out waiting for {what}; pane:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether the command in the pane has exited.
    fn exited(&self) -> bool {
        let o = self.tmux(&["list-panes", "-F", "#{pane_dead}"]);
        String::from_utf8_lossy(&o.stdout).trim() == "1"
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// `oxinfer ARGS` as a shell line, with the tests' own model cache.
fn shell_line(args: &[&str]) -> String {
    let cache = std::env::temp_dir().join("oxinfer-cli-test-cache");
    let mut line = format!(
        "OXINFER_CACHE='{}' '{}'",
        cache.display(),
        env!("CARGO_BIN_EXE_oxinfer")
    );
    for a in args {
        line.push_str(&format!(" '{a}'"));
    }
    line
}

/// The lines of the pane that start with the chat prompt (tmux trims the trailing space).
fn prompt_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| *l == ">" || l.starts_with("> "))
        .count()
}

/// The last line of the pane with text on it.
fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

#[test]
fn run_without_a_prompt_on_a_terminal_says_how_to_give_one() {
    let model = super::tiny_base();
    let Some(pane) = Pane::start("hint", &shell_line(&["run", "-m", &model, "-n", "2"])) else {
        return;
    };
    pane.wait_for("the hint", 60, |t| t.contains("reading the prompt"));
    pane.keys(&["hello", "Enter", "C-d"]);
    let text = pane.wait_for("the stats line", 60, |t| t.contains("tok/s"));
    assert!(text.contains("Ctrl-D"), "{text}");
}

#[test]
fn chat_edits_lines_recalls_history_and_ctrl_c_stops_only_the_reply() {
    let Some(model) = crate::smollm2() else {
        return;
    };
    let line = shell_line(&[
        "chat",
        "-m",
        model.to_str().unwrap(),
        "--temp",
        "0",
        "-n",
        "400",
    ]);
    let Some(pane) = Pane::start("chat", &line) else {
        return;
    };
    pane.wait_for("the prompt", 120, |t| prompt_lines(t) >= 1);
    // Left arrow and an insert: edited in place, not `^[[D` in the text.
    pane.keys(&["Hi thee", "Left", "r", "End", "!", "Enter"]);
    let text = pane.wait_for("the first reply", 120, |t| prompt_lines(t) >= 2);
    assert!(!text.contains("^["), "escape codes echoed: {text}");
    assert!(text.contains("> Hi there!"), "{text}");
    // Up recalls the last line.
    pane.keys(&["Up"]);
    pane.wait_for("the recalled line", 30, |t| last_line(t) == "> Hi there!");
    pane.keys(&["C-u"]);
    // A long reply, cut by Ctrl-C as soon as it has begun: the chat goes on.
    let ask = "Write a long story about a dragon and a knight.";
    pane.keys(&[ask, "Enter"]);
    pane.wait_for("the reply to begin", 120, |t| {
        t.rsplit(ask)
            .next()
            .is_some_and(|rest| !rest.trim().is_empty())
    });
    pane.keys(&["C-c"]);
    let text = pane.wait_for("the cancel notice", 60, |t| t.contains("(reply cancelled)"));
    assert!(!pane.exited(), "Ctrl-C ended the chat: {text}");
    pane.wait_for("a new prompt", 30, |t| {
        t.rsplit("(reply cancelled)")
            .next()
            .is_some_and(|rest| prompt_lines(rest) >= 1)
    });
    // Ctrl-C at the prompt does not quit either; Ctrl-D does.
    pane.keys(&["C-c"]);
    pane.wait_for("the quit hint", 30, |t| t.contains("Ctrl-D or /exit quits"));
    assert!(!pane.exited());
    pane.keys(&["C-d"]);
    let start = Instant::now();
    while !pane.exited() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Ctrl-D did not quit"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
