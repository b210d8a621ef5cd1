//! Every model on this machine that `-m` can name (our cache, the Hugging Face cache, Ollama's
//! store), and removal from the caches we write.

use std::fs;
use std::path::{Path, PathBuf};

use super::hf::cache::{repo_from_folder_name, RepoCache};
use super::reference::{quant_tag_of, split_part};
use super::{models, ollama, HubError, ModelRef};

/// Where a listed model lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// oxinfer's own cache (known models).
    Oxinfer,
    /// The Hugging Face cache.
    HuggingFace,
    /// Ollama's store.
    Ollama,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Oxinfer => "oxinfer",
            Source::HuggingFace => "huggingface",
            Source::Ollama => "ollama",
        })
    }
}

/// One model found on disk.
#[derive(Debug, Clone)]
pub struct LocalModel {
    /// Where it was found.
    pub source: Source,
    /// What to pass to `-m` to use it.
    pub reference: String,
    /// The file or folder loaded.
    pub path: PathBuf,
    /// Bytes on disk (all parts of a split GGUF, all files of a safetensors folder).
    pub size: u64,
    /// `gguf`, `safetensors` or `zip`.
    pub format: &'static str,
    /// The quant tag (from the file name, or Ollama's `file_type`); `None` when unknown.
    pub quant: Option<String>,
}

/// The places searched: oxinfer's models folder, the Hugging Face hub cache, Ollama's store.
#[derive(Debug, Clone)]
pub struct Places {
    /// oxinfer's `<cache>/models`.
    pub models_dir: PathBuf,
    /// The Hugging Face hub cache folder.
    pub hf_cache: PathBuf,
    /// Ollama's model store.
    pub ollama_store: PathBuf,
}

impl Places {
    /// The places from this process's environment.
    pub fn from_env() -> Self {
        Places {
            models_dir: super::models_dir(),
            hf_cache: super::hf::config::HfConfig::from_env().hub_cache,
            ollama_store: ollama::store_dir(),
        }
    }
}

/// Every model in `places`, sorted by source then reference.
pub fn list_models(places: &Places) -> Vec<LocalModel> {
    let mut out = Vec::new();
    for m in models::known_models() {
        if let Some(path) = m.cached_in(&places.models_dir) {
            out.push(LocalModel {
                source: Source::Oxinfer,
                reference: m.name.to_string(),
                size: tree_size(&path),
                format: format_of(&path),
                quant: quant_tag_of(m.file_name),
                path,
            });
        }
    }
    list_hf(&places.hf_cache, &mut out);
    list_ollama(&places.ollama_store, &mut out);
    out
}

fn format_of(path: &Path) -> &'static str {
    let name = path.to_string_lossy().to_ascii_lowercase();
    if name.ends_with(".gguf") || name.contains("sha256-") {
        "gguf"
    } else if name.ends_with(".zip") {
        "zip"
    } else {
        "safetensors"
    }
}

/// Bytes of a file, or of every file under a folder (symlinks followed).
fn tree_size(path: &Path) -> u64 {
    if path.is_dir() {
        fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| tree_size(&e.path()))
            .sum()
    } else {
        fs::metadata(path).map_or(0, |m| m.len())
    }
}

fn list_hf(hub: &Path, out: &mut Vec<LocalModel>) {
    let mut repos: Vec<PathBuf> = fs::read_dir(hub)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    repos.sort();
    for dir in repos {
        let folder = dir.file_name().unwrap_or_default().to_string_lossy();
        let Some(repo) = repo_from_folder_name(&folder) else {
            continue;
        };
        let cache = RepoCache { dir: dir.clone() };
        let refs = read_refs(&dir);
        let mut commits: Vec<String> = fs::read_dir(dir.join("snapshots"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        commits.sort();
        for commit in commits {
            let at = match refs.iter().find(|(_, c)| *c == commit) {
                Some((r, _)) if r == "main" => String::new(),
                Some((r, _)) => format!("@{r}"),
                None => format!("@{commit}"),
            };
            let snapshot = cache.snapshot(&commit);
            let files = cache.snapshot_files(&commit);
            if files.iter().any(|f| f.ends_with(".safetensors")) {
                out.push(LocalModel {
                    source: Source::HuggingFace,
                    reference: format!("{repo}{at}"),
                    size: tree_size(&snapshot),
                    format: "safetensors",
                    quant: None,
                    path: snapshot.clone(),
                });
            }
            for f in files
                .iter()
                .filter(|f| f.to_ascii_lowercase().ends_with(".gguf"))
            {
                let stem = &f[..f.len() - 5];
                let size = match split_part(stem) {
                    Some((_, part, _)) if part != 1 => continue,
                    Some((name, _, count)) => (1..=count)
                        .map(|i| {
                            tree_size(&snapshot.join(format!("{name}-{i:05}-of-{count:05}.gguf")))
                        })
                        .sum(),
                    None => tree_size(&snapshot.join(f)),
                };
                out.push(LocalModel {
                    source: Source::HuggingFace,
                    reference: format!("{repo}{at}/{f}"),
                    size,
                    format: "gguf",
                    quant: quant_tag_of(f),
                    path: snapshot.join(f),
                });
            }
        }
    }
}

/// `refs/*` of a repo folder: (revision, commit).
fn read_refs(dir: &Path) -> Vec<(String, String)> {
    let root = dir.join("refs");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let (Ok(rel), Ok(text)) = (p.strip_prefix(&root), fs::read_to_string(&p)) {
                let name = rel.to_string_lossy().replace('\\', "/");
                out.push((name, text.trim().to_string()));
            }
        }
    }
    out.sort();
    out
}

fn list_ollama(store: &Path, out: &mut Vec<LocalModel>) {
    for (name, manifest) in ollama::list_manifests(store) {
        let Ok((blob, _)) = ollama::model_blob(store, &manifest) else {
            continue;
        };
        if !blob.is_file() {
            continue;
        }
        out.push(LocalModel {
            source: Source::Ollama,
            reference: format!("ollama:{name}"),
            size: tree_size(&blob),
            format: "gguf",
            quant: ollama::file_type(store, &manifest),
            path: blob,
        });
    }
}

/// Removes what `spec` names from the cache that holds it and returns the paths removed: a
/// known model's file (with its hash record and unpacked folder), or a Hugging Face repository's
/// whole cache folder. Ollama's store and plain paths are not ours to delete: an error says so.
pub fn remove_model(spec: &str, places: &Places) -> Result<Vec<PathBuf>, HubError> {
    let refuse = |reason: String| HubError::BadReference {
        spec: spec.to_string(),
        reason,
    };
    let targets: Vec<PathBuf> = match super::parse_reference(spec) {
        Ok(ModelRef::Known(m)) => {
            let file = m.path_in(&places.models_dir);
            let mut t = vec![super::record_path(&file), file];
            if let Some(dir) = super::unpack::unpacked_dir(m, &places.models_dir) {
                t.push(dir);
            }
            t
        }
        Ok(ModelRef::Hf(r)) => vec![RepoCache::new(&places.hf_cache, &r.repo).dir],
        Ok(ModelRef::Ollama(r)) => {
            return Err(refuse(format!(
                "models in Ollama's store are Ollama's; remove it with `ollama rm {}:{}`",
                r.name, r.tag
            )))
        }
        Ok(ModelRef::Path(p)) => {
            return Err(refuse(format!(
                "{} is a file or folder of yours, not a cached model; delete it yourself",
                p.display()
            )))
        }
        Err(e) => return Err(e),
    };
    let mut removed = Vec::new();
    for t in targets {
        let result = if t.is_dir() {
            fs::remove_dir_all(&t)
        } else if t.exists() {
            fs::remove_file(&t)
        } else {
            continue;
        };
        result.map_err(|e| HubError::io(format!("cannot remove {}", t.display()), e))?;
        removed.push(t);
    }
    if removed.is_empty() {
        return Err(refuse("nothing of it is in the cache".into()));
    }
    Ok(removed)
}
