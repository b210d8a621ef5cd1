//! README's usage block against `--help`: every command the binary has is listed there, and
//! every flag listed for a command is one that command's `--help` shows.

use crate::cli_process::{oxinfer, stdout};
use std::collections::BTreeSet;

/// The first ```sh block under `## Using the CLI`, its continuation lines joined to their
/// command, comments dropped.
fn usage_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(crate::common::fixtures().join("../../README.md"))
        .expect("README.md");
    let section = readme
        .split("## Using the CLI")
        .nth(1)
        .expect("README has a `## Using the CLI` section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block in that section");
    let mut lines: Vec<String> = Vec::new();
    for raw in block.lines() {
        let line = raw.split(" # ").next().unwrap_or("");
        if line.starts_with("oxinfer ") {
            lines.push(line.to_string());
        } else if let Some(last) = lines.last_mut() {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    lines
}

/// The flags (`-x`, `--long-name`) a line or help text mentions.
fn flags(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| {
            let name = w.trim_start_matches('-');
            (w.starts_with("--") && name.len() > 1 || w.len() == 2 && w.starts_with('-'))
                && name.starts_with(|c: char| c.is_ascii_alphabetic())
        })
        .map(str::to_string)
        .collect()
}

/// The subcommands `oxinfer --help` lists.
fn subcommands() -> Vec<String> {
    let help = stdout(&oxinfer(&["--help"]));
    help.split("Commands:")
        .nth(1)
        .expect("a Commands: section")
        .split("Options:")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn readme_usage_block_matches_help() {
    let lines = usage_lines();
    let listed: BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    for cmd in subcommands() {
        assert!(
            listed.contains(cmd.as_str()),
            "README's usage block lacks `oxinfer {cmd}`"
        );
    }
    for line in &lines {
        let cmd = line.split_whitespace().nth(1).unwrap();
        let help = stdout(&oxinfer(&[cmd, "--help"]));
        assert!(!help.is_empty(), "`oxinfer {cmd} --help` printed nothing");
        let known = flags(&help);
        for flag in flags(line) {
            assert!(
                known.contains(&flag),
                "README: `oxinfer {cmd}` has no flag {flag} in its --help:\n{help}"
            );
        }
    }
}
