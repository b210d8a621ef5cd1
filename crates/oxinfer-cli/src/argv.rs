//! llama.cpp's multi-letter short flags (`-ngl 99`), rewritten before clap parses.
//!
//! clap's short flags are one character, so `-ngl 99` would read as `-n gl` (and fail on
//! "gl"). The spellings llama.cpp users bring that oxinfer has are rewritten to its long
//! flags; those it does not have are refused with a line saying what to do instead. Nothing
//! after `--` is touched (a value that starts with `-` is given as `--flag=VALUE`, as clap
//! wants anyway, so it is never mistaken for one of these flags).

use std::ffi::OsString;

/// llama.cpp spelling → oxinfer's flag.
const REWRITES: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    ("-np", "--parallel"),
    ("-sys", "--system"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
];

/// llama.cpp flags oxinfer has no equivalent of, with what to do instead.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("-cnv", "for a conversation run `oxinfer chat`"),
    (
        "-fa",
        "flash attention is always on (a fused tiled attention); drop -fa",
    ),
    (
        "-mg",
        "the first CUDA GPU is used; choose one with CUDA_VISIBLE_DEVICES",
    ),
    ("-sm", "one GPU runs the model; there is no split mode"),
    ("-ts", "one GPU runs the model; there is no tensor split"),
    ("-nkvo", "the KV cache stays where the model runs"),
    (
        "-tb",
        "one thread count serves prompt and generation: use -t N",
    ),
    ("-ub", "prompt chunks are sized automatically"),
    ("-hf", "give a GGUF file or a model name with -m"),
    ("-hfr", "give a GGUF file or a model name with -m"),
    ("-hff", "give a GGUF file or a model name with -m"),
    ("-mli", "chat reads multi-line pastes as one turn already"),
];

/// A command-line word oxinfer refuses, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// The word as typed, e.g. `-fa`.
    pub flag: String,
    /// What to do instead.
    pub hint: &'static str,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} is a llama.cpp flag that oxinfer does not have: {} (see oxinfer <command> --help)",
            self.flag, self.hint
        )
    }
}

/// `args` (program name first) with llama.cpp's multi-letter short flags rewritten, or the
/// first such flag that oxinfer does not have. `-ngl=99` becomes `--n-gpu-layers=99`.
pub fn normalize(args: impl IntoIterator<Item = OsString>) -> Result<Vec<OsString>, Refused> {
    let mut out = Vec::new();
    let mut rest_is_positional = false;
    for arg in args {
        let Some(word) = arg.to_str().filter(|_| !rest_is_positional) else {
            out.push(arg);
            continue;
        };
        if word == "--" {
            rest_is_positional = true;
            out.push(arg);
            continue;
        }
        let (flag, value) = match word.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (word, None),
        };
        if let Some((_, long)) = REWRITES.iter().find(|(short, _)| *short == flag) {
            out.push(match value {
                Some(v) => OsString::from(format!("{long}={v}")),
                None => OsString::from(*long),
            });
        } else if let Some((_, hint)) = UNSUPPORTED.iter().find(|(short, _)| *short == flag) {
            return Err(Refused {
                flag: flag.to_string(),
                hint,
            });
        } else {
            out.push(arg);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(words: &[&str]) -> Result<Vec<String>, Refused> {
        normalize(words.iter().map(OsString::from)).map(|v| {
            v.into_iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect()
        })
    }

    #[test]
    fn multi_letter_short_flags_become_long_flags() {
        assert_eq!(
            norm(&["oxinfer", "run", "-ngl", "99", "-n", "8"]).unwrap(),
            ["oxinfer", "run", "--n-gpu-layers", "99", "-n", "8"]
        );
        assert_eq!(
            norm(&["oxinfer", "serve", "-ngl=0", "-np", "2"]).unwrap(),
            ["oxinfer", "serve", "--n-gpu-layers=0", "--parallel", "2"]
        );
        assert_eq!(
            norm(&["oxinfer", "perplexity", "-ctk", "q8_0", "-ctv=q4_0"]).unwrap(),
            [
                "oxinfer",
                "perplexity",
                "--cache-type-k",
                "q8_0",
                "--cache-type-v=q4_0"
            ]
        );
        // After `--` every word is positional, as clap reads it.
        assert_eq!(
            norm(&["oxinfer", "run", "--", "-ngl"]).unwrap(),
            ["oxinfer", "run", "--", "-ngl"]
        );
    }

    #[test]
    fn flags_oxinfer_lacks_are_refused_with_a_hint() {
        let e = norm(&["oxinfer", "run", "-fa", "-p", "x"]).unwrap_err();
        assert_eq!(e.flag, "-fa");
        assert!(e.to_string().contains("flash attention"), "{e}");
    }
}
