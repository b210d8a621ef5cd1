//! `oxinfer run [MODEL] [PROMPT...]`, as Ollama reads it: which positional word is the model
//! and which words are the prompt.
//!
//! The rule (also in README and docs/cli.md): with `-m`, every word is the prompt. Without it,
//! the first word is the model when it is a model name (`smollm2-135m-instruct`, `gemma3-270m`,
//! an alias or a file name), an existing file or folder, or a single word that reads as a path
//! (contains `/`, starts with `.` or `~`, ends in `.gguf` or `.safetensors`); the other words
//! are the prompt, joined by spaces. Otherwise all words are the prompt and the default model
//! runs. A lone word within two edits of a model name is refused with a suggestion instead of
//! being sent to the default model as a prompt. With `-p` or `-f`, the one positional word
//! allowed is the model.

use anyhow::{bail, Result};
use std::path::Path;

/// What the positional words of `run` name.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ModelAndPrompt {
    /// The model, when the first word names one.
    pub model: Option<String>,
    /// The prompt: the remaining words joined by single spaces; `None` when there are none.
    pub prompt: Option<String>,
}

/// Splits `words` by the rule above. `model_flag`: `-m` was given; `prompt_flag`: `-p`, `-f`
/// or `--tokens` was given.
pub fn split(words: &[String], model_flag: bool, prompt_flag: bool) -> Result<ModelAndPrompt> {
    let join = |w: &[String]| (!w.is_empty()).then(|| w.join(" "));
    let Some(first) = words.first() else {
        return Ok(ModelAndPrompt::default());
    };
    if prompt_flag {
        if model_flag {
            bail!("the prompt is given twice: by -p/-f/--tokens and as {first:?}; give one");
        }
        if words.len() > 1 {
            bail!(
                "with -p, -f or --tokens only the model may be positional, not {:?}",
                words[1..].join(" ")
            );
        }
        return Ok(ModelAndPrompt {
            model: Some(first.clone()),
            prompt: None,
        });
    }
    if model_flag {
        return Ok(ModelAndPrompt {
            model: None,
            prompt: join(words),
        });
    }
    if names_a_model(first) {
        return Ok(ModelAndPrompt {
            model: Some(first.clone()),
            prompt: join(&words[1..]),
        });
    }
    if words.len() == 1 {
        if let Some(near) = near_model_name(first) {
            bail!(
                "{first:?} is not a model name; did you mean {near}? (to send it as the prompt to \
                 the default model, use -p {first:?})"
            );
        }
    }
    Ok(ModelAndPrompt {
        model: None,
        prompt: join(words),
    })
}

/// Whether `word` is a model name, an existing path, or a single word that reads as a path.
fn names_a_model(word: &str) -> bool {
    if oxinfer::hub::find_model(word).is_some() || Path::new(word).exists() {
        return true;
    }
    if word.is_empty() || word.chars().any(char::is_whitespace) {
        return false;
    }
    let lower = word.to_ascii_lowercase();
    lower.starts_with("ollama:")
        || word.contains('/')
        || word.starts_with('.')
        || word.starts_with('~')
        || lower.ends_with(".gguf")
        || lower.ends_with(".safetensors")
}

/// The known model name within two edits of `word` (case-insensitive), if any.
fn near_model_name(word: &str) -> Option<&'static str> {
    let w = word.to_ascii_lowercase();
    oxinfer::hub::known_models()
        .iter()
        .flat_map(|m| std::iter::once(m.name).chain(m.aliases.iter().copied()))
        .find(|name| edit_distance(&w, name) <= 2)
}

/// Levenshtein distance between two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| w.to_string()).collect()
    }

    fn model_prompt(model: Option<&str>, prompt: Option<&str>) -> ModelAndPrompt {
        ModelAndPrompt {
            model: model.map(str::to_string),
            prompt: prompt.map(str::to_string),
        }
    }

    #[test]
    fn first_word_is_the_model_only_when_it_names_one() {
        let s = |w: &[&str]| split(&words(w), false, false).unwrap();
        assert_eq!(
            s(&["gemma3-270m", "Once", "upon"]),
            model_prompt(Some("gemma3-270m"), Some("Once upon"))
        );
        assert_eq!(
            s(&["SMOLLM2-135M"]),
            model_prompt(Some("SMOLLM2-135M"), None)
        );
        assert_eq!(
            s(&["models/x.gguf", "hi"]),
            model_prompt(Some("models/x.gguf"), Some("hi"))
        );
        assert_eq!(
            s(&["Write a haiku about the sea."]),
            model_prompt(None, Some("Write a haiku about the sea."))
        );
        assert_eq!(
            s(&["Why", "is", "1/2", "less?"]),
            model_prompt(None, Some("Why is 1/2 less?"))
        );
        assert_eq!(s(&["hello"]), model_prompt(None, Some("hello")));
        assert_eq!(s(&[]), model_prompt(None, None));
    }

    #[test]
    fn flags_decide_what_the_words_are() {
        assert_eq!(
            split(&words(&["gemma3-270m", "hi"]), true, false).unwrap(),
            model_prompt(None, Some("gemma3-270m hi"))
        );
        assert_eq!(
            split(&words(&["anything"]), false, true).unwrap(),
            model_prompt(Some("anything"), None)
        );
        assert!(split(&words(&["a", "b"]), false, true).is_err());
        assert!(split(&words(&["a"]), true, true).is_err());
    }

    #[test]
    fn a_near_miss_of_a_model_name_is_refused_with_the_name() {
        let e = split(&words(&["smollm2-135m-instuct"]), false, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean smollm2-135m-instruct"), "{e}");
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
