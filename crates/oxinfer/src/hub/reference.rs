//! What `-m` names, parsed into one type: a path, a known model, a Hugging Face repository
//! (`org/repo`, `org/repo:QUANT`, `org/repo/file.gguf`, `hf://org/repo@rev`) or a model in
//! Ollama's store (`ollama:name[:tag]`).

use std::path::{Path, PathBuf};

use super::models::{find_model, KnownModel};
use super::HubError;

/// A parsed model reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelRef {
    /// An existing file or folder.
    Path(PathBuf),
    /// A built-in model name ([`super::known_models`]).
    Known(&'static KnownModel),
    /// A Hugging Face Hub repository.
    Hf(HfRef),
    /// A model pulled by Ollama.
    Ollama(OllamaRef),
}

/// A model repository on the Hugging Face Hub and what to take from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfRef {
    /// `org/repo`.
    pub repo: String,
    /// Branch, tag or commit (`main` unless `@rev` was given).
    pub revision: String,
    /// Which files of the repository make the model.
    pub select: HfSelect,
}

/// Which files of a Hugging Face repository make the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HfSelect {
    /// The repository's default: a safetensors model (config, tokenizer, all shards) when it has
    /// one, else its GGUF file (Q4_K_M when there, else the first).
    Default,
    /// The GGUF file whose name carries this quant tag (`Q4_K_M`; matched case-insensitively).
    Quant(String),
    /// One file by its path in the repository.
    File(String),
}

/// A model in Ollama's store: `name` (`llama3.2`, or `namespace/name`) and `tag` (`latest`
/// unless given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OllamaRef {
    /// The model name, with a namespace (`user/name`) when one was given.
    pub name: String,
    /// The tag (`latest` unless given).
    pub tag: String,
}

impl std::fmt::Display for HfRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.repo)?;
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        match &self.select {
            HfSelect::Default => Ok(()),
            HfSelect::Quant(q) => write!(f, ":{q}"),
            HfSelect::File(p) => write!(f, "/{p}"),
        }
    }
}

impl std::fmt::Display for OllamaRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ollama:{}:{}", self.name, self.tag)
    }
}

/// The forms `-m` accepts, for error messages.
pub const REFERENCE_FORMS: &str = "a path, a model name, org/repo, org/repo:QUANT, \
     org/repo/file.gguf, hf://org/repo@revision or ollama:name[:tag]";

/// File extensions that make a lone word or `dir/file` read as a path.
const PATH_EXTENSIONS: [&str; 4] = ["gguf", "safetensors", "json", "bin"];

/// Parses what `-m` names. An existing path wins over every other reading.
pub fn parse_reference(spec: &str) -> Result<ModelRef, HubError> {
    let spec = spec.trim();
    if !spec.is_empty() && Path::new(spec).exists() {
        return Ok(ModelRef::Path(PathBuf::from(spec)));
    }
    if let Some(model) = find_model(spec) {
        return Ok(ModelRef::Known(model));
    }
    if let Some(rest) = strip_prefix_ci(spec, "ollama:") {
        return parse_ollama(spec, rest).map(ModelRef::Ollama);
    }
    if let Some(rest) = strip_prefix_ci(spec, "hf://") {
        return parse_hf(spec, rest).map(ModelRef::Hf);
    }
    if looks_like_local_path(spec) {
        return Err(HubError::MissingPath {
            path: PathBuf::from(spec),
            known: super::models::known_names(),
        });
    }
    if spec.contains('/') {
        return parse_hf(spec, spec).map(ModelRef::Hf);
    }
    Err(HubError::UnknownModel {
        name: spec.to_string(),
        known: super::models::known_names(),
    })
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// A spec that can only be meant as a local path: absolute, `./`, `~`, a Windows drive, a lone
/// file name with a weights extension, or `dir/file.gguf` (a repo is never named like a file).
fn looks_like_local_path(spec: &str) -> bool {
    let has_ext = |s: &str| {
        Path::new(s)
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| PATH_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
    };
    let parts: Vec<&str> = spec.split('/').collect();
    spec.starts_with(['/', '.', '~', '\\'])
        || spec.contains('\\')
        || spec.get(1..3) == Some(":\\")
        || (parts.len() <= 2 && has_ext(spec))
}

/// One component of a repo id: letters, digits, `-`, `_`, `.` (the Hub's rule).
fn valid_id_part(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(['-', '.'])
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn bad(spec: &str, reason: impl Into<String>) -> HubError {
    HubError::BadReference {
        spec: spec.to_string(),
        reason: reason.into(),
    }
}

/// `org/repo[@rev][:QUANT]` or `org/repo[@rev]/path/in/repo`.
fn parse_hf(spec: &str, body: &str) -> Result<HfRef, HubError> {
    let mut parts = body.splitn(3, '/');
    let org = parts.next().unwrap_or_default();
    let repo_part = parts.next().unwrap_or_default();
    let file = parts.next();
    if !valid_id_part(org) || repo_part.is_empty() {
        return Err(bad(
            spec,
            "expected a Hugging Face repository as org/repo (e.g. Qwen/Qwen3-0.6B-GGUF), \
             optionally with :QUANT, /file.gguf or @revision",
        ));
    }
    let (name_rev, quant) = match repo_part.split_once(':') {
        Some((n, q)) => (n, Some(q)),
        None => (repo_part, None),
    };
    let (name, revision) = match name_rev.split_once('@') {
        Some((n, r)) => (n, r),
        None => (name_rev, "main"),
    };
    if !valid_id_part(name) {
        return Err(bad(
            spec,
            format!("'{name}' is not a repository name (letters, digits, '-', '_', '.')"),
        ));
    }
    if revision.is_empty() {
        return Err(bad(spec, "the revision after '@' is empty"));
    }
    let select = match (quant, file) {
        (Some(_), Some(_)) => {
            return Err(bad(spec, "give either :QUANT or /file, not both"));
        }
        (Some(q), None) if q.is_empty() || !valid_id_part(q) => {
            return Err(bad(spec, "the quant tag after ':' is empty or malformed"));
        }
        (Some(q), None) => HfSelect::Quant(q.to_string()),
        (None, Some(f)) if f.is_empty() || f.split('/').any(|c| c.is_empty() || c == "..") => {
            return Err(bad(spec, "the file path after org/repo/ is malformed"));
        }
        (None, Some(f)) => HfSelect::File(f.to_string()),
        (None, None) => HfSelect::Default,
    };
    Ok(HfRef {
        repo: format!("{org}/{name}"),
        revision: revision.to_string(),
        select,
    })
}

/// `name[:tag]`, `namespace/name[:tag]`.
fn parse_ollama(spec: &str, body: &str) -> Result<OllamaRef, HubError> {
    let (name, tag) = match body.rsplit_once(':') {
        Some((n, t)) => (n, t),
        None => (body, "latest"),
    };
    let ok_name = name.split('/').all(valid_id_part) && name.split('/').count() <= 3;
    if !ok_name || !valid_id_part(tag) {
        return Err(bad(
            spec,
            "expected ollama:name or ollama:name:tag (e.g. ollama:llama3.2:1b)",
        ));
    }
    Ok(OllamaRef {
        name: name.to_ascii_lowercase(),
        tag: tag.to_string(),
    })
}

/// The quant tag in a GGUF file name (`Qwen3-0.6B-Q8_0.gguf` → `Q8_0`; split parts
/// `…-Q4_K_M-00001-of-00002.gguf` → `Q4_K_M`), upper-cased; `None` when the name has none.
pub fn quant_tag_of(file_name: &str) -> Option<String> {
    let base = file_name.rsplit('/').next().unwrap_or(file_name);
    let stem = strip_suffix_ci(base, ".gguf")?;
    let stem = split_part(stem).map_or(stem, |(s, _, _)| s);
    let tag = stem.rsplit(['-', '.']).next()?;
    let upper = tag.to_ascii_uppercase();
    let known_start = ["Q", "IQ", "TQ", "F16", "F32", "BF16", "MXFP4", "UD"];
    let looks = known_start.iter().any(|p| upper.starts_with(p))
        && upper
            .chars()
            .nth(1)
            .is_some_and(|c| c.is_ascii_alphanumeric());
    (looks && upper.len() <= 12).then_some(upper)
}

fn strip_suffix_ci<'a>(s: &'a str, suffix: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(suffix.len())?;
    let tail = s.get(cut..)?;
    tail.eq_ignore_ascii_case(suffix).then(|| &s[..cut])
}

/// For a split GGUF stem `name-00001-of-00003`: (`name`, part 1, count 3).
pub fn split_part(stem: &str) -> Option<(&str, u32, u32)> {
    let (head, count) = stem.rsplit_once("-of-")?;
    let (name, part) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(part) || !digits(count) {
        return None;
    }
    Some((name, part.parse().ok()?, count.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hf(spec: &str) -> HfRef {
        match parse_reference(spec) {
            Ok(ModelRef::Hf(r)) => r,
            other => panic!("{spec}: {other:?}"),
        }
    }

    #[test]
    fn hugging_face_forms() {
        let r = hf("Qwen/Qwen3-0.6B-GGUF:Q8_0");
        assert_eq!(r.repo, "Qwen/Qwen3-0.6B-GGUF");
        assert_eq!(r.revision, "main");
        assert_eq!(r.select, HfSelect::Quant("Q8_0".into()));
        let r = hf("org/repo/sub/file.gguf");
        assert_eq!(r.select, HfSelect::File("sub/file.gguf".into()));
        let r = hf("hf://org/repo@v1.0");
        assert_eq!((r.repo.as_str(), r.revision.as_str()), ("org/repo", "v1.0"));
        assert_eq!(r.select, HfSelect::Default);
        assert_eq!(hf("HF://a/b@dev:q4_k_m").to_string(), "a/b@dev:q4_k_m");
        assert_eq!(hf("a/b").to_string(), "a/b");
    }

    #[test]
    fn malformed_references_name_what_was_expected() {
        for spec in [
            "org/",
            "hf://org",
            "hf:///repo",
            "a/b:",
            "a/b@",
            "a/b:Q4/f.gguf",
        ] {
            let e = parse_reference(spec).unwrap_err().to_string();
            assert!(e.contains(spec), "{spec}: {e}");
            assert!(matches!(
                parse_reference(spec),
                Err(HubError::BadReference { .. })
            ));
        }
        assert!(parse_reference("org/")
            .unwrap_err()
            .to_string()
            .contains("org/repo"));
    }

    #[test]
    fn paths_and_names_keep_their_meaning() {
        assert!(matches!(
            parse_reference("models/x.gguf"),
            Err(HubError::MissingPath { .. })
        ));
        assert!(matches!(
            parse_reference("./nope"),
            Err(HubError::MissingPath { .. })
        ));
        assert!(matches!(
            parse_reference("nonsense"),
            Err(HubError::UnknownModel { .. })
        ));
        assert!(matches!(
            parse_reference("gemma3-270m"),
            Ok(ModelRef::Known(_))
        ));
    }

    #[test]
    fn ollama_forms() {
        let r = |s: &str| match parse_reference(s) {
            Ok(ModelRef::Ollama(o)) => (o.name, o.tag),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(r("ollama:llama3.2"), ("llama3.2".into(), "latest".into()));
        assert_eq!(r("ollama:Qwen3:0.6b"), ("qwen3".into(), "0.6b".into()));
        assert_eq!(r("ollama:me/mine:v2"), ("me/mine".into(), "v2".into()));
        assert!(parse_reference("ollama:").is_err());
    }

    #[test]
    fn quant_tags_from_file_names() {
        assert_eq!(
            quant_tag_of("Qwen3-0.6B-Q8_0.gguf").as_deref(),
            Some("Q8_0")
        );
        assert_eq!(
            quant_tag_of("m-q4_k_m-00001-of-00002.gguf").as_deref(),
            Some("Q4_K_M")
        );
        assert_eq!(quant_tag_of("model.IQ2_XS.gguf").as_deref(), Some("IQ2_XS"));
        assert_eq!(quant_tag_of("model.gguf"), None);
        assert_eq!(split_part("a-b-00002-of-00003"), Some(("a-b", 2, 3)));
        assert_eq!(split_part("a-2-of-3"), None);
    }
}
