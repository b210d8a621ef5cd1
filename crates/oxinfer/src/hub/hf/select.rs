//! Which files of a repository make the model a reference asks for.

use crate::hub::reference::{quant_tag_of, split_part, HfRef, HfSelect};
use crate::hub::HubError;

/// The files to fetch and what to hand the loader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Repository paths to fetch (every part of a split GGUF; every shard of a safetensors
    /// model with its config and tokenizer).
    pub files: Vec<String>,
    /// The file to load (a GGUF, its first part when split), or `None` for the snapshot folder
    /// (a safetensors model).
    pub entry: Option<String>,
}

/// Extensions of weights in formats oxinfer does not load, and of files no model needs.
const SKIPPED_EXTENSIONS: [&str; 14] = [
    "bin",
    "pt",
    "pth",
    "h5",
    "msgpack",
    "onnx",
    "onnx_data",
    "ot",
    "tflite",
    "gguf",
    "md",
    "png",
    "jpg",
    "xml",
];
/// Folders of other runtimes' exports.
const SKIPPED_FOLDERS: [&str; 5] = ["onnx/", "openvino/", "coreml/", "tf/", "flax/"];

fn is_gguf(f: &str) -> bool {
    f.to_ascii_lowercase().ends_with(".gguf")
}

/// A GGUF that is a model's weights, not a multimodal projector.
fn is_weights_gguf(f: &str) -> bool {
    let base = f.rsplit('/').next().unwrap_or(f).to_ascii_lowercase();
    is_gguf(f) && !base.starts_with("mmproj")
}

/// A GGUF that is llama.cpp's multimodal projector (`mmproj*.gguf`): a model's image and audio
/// towers.
fn is_projector_gguf(f: &str) -> bool {
    is_gguf(f) && !is_weights_gguf(f)
}

/// Quantization tags of projector files in order of preference after the model's own: the
/// precisions llama.cpp's repositories ship their towers in.
const PROJECTOR_TAGS: [&str; 4] = ["F16", "BF16", "F32", "Q8_0"];

/// The projector that goes with the model GGUF `entry` among the repository's `files`: an
/// `mmproj*.gguf` in the entry's folder, the one carrying the entry's quantization tag when
/// there is one, else the first of [`PROJECTOR_TAGS`] present, else the first by name; `None`
/// when that folder holds no projector.
pub fn projector_for(files: &[String], entry: &str) -> Option<String> {
    let folder = |f: &str| f.rsplit_once('/').map_or("", |(d, _)| d).to_string();
    let dir = folder(entry);
    let mut candidates: Vec<&String> = files
        .iter()
        .filter(|f| is_projector_gguf(f) && folder(f) == dir)
        .collect();
    candidates.sort();
    let own = quant_tag_of(entry);
    let preferred = own
        .iter()
        .map(String::as_str)
        .chain(PROJECTOR_TAGS)
        .find_map(|tag| {
            candidates
                .iter()
                .find(|f| quant_tag_of(f).as_deref() == Some(tag))
        });
    preferred.or(candidates.first()).map(|f| f.to_string())
}

/// `f` and, when it is part of a split GGUF, every other part listed in `files`, in order; the
/// first part first.
fn with_split_parts(files: &[String], f: &str) -> Vec<String> {
    let stem = &f[..f.len() - ".gguf".len()];
    let Some((name, _, count)) = split_part(stem) else {
        return vec![f.to_string()];
    };
    (1..=count)
        .map(|i| format!("{name}-{i:05}-of-{count:05}.gguf"))
        .filter(|p| files.contains(p))
        .collect()
}

/// Picks the files `r` asks for out of the repository's `files`.
pub fn select(files: &[String], r: &HfRef) -> Result<Selection, HubError> {
    let ggufs: Vec<&String> = files.iter().filter(|f| is_weights_gguf(f)).collect();
    let gguf_selection = |f: &str| {
        let parts = with_split_parts(files, f);
        Selection {
            entry: parts.first().cloned(),
            files: parts,
        }
    };
    match &r.select {
        HfSelect::File(f) => {
            if !files.contains(f) {
                return Err(HubError::NotOnHub {
                    what: format!("file {f} of {}@{}", r.repo, r.revision),
                    url: r.repo.clone(),
                });
            }
            if is_gguf(f) {
                return Ok(gguf_selection(f));
            }
            Ok(Selection {
                files: vec![f.clone()],
                entry: Some(f.clone()),
            })
        }
        HfSelect::Quant(q) => {
            let want = q.to_ascii_uppercase();
            let mut matching: Vec<&String> = ggufs
                .iter()
                .copied()
                .filter(|f| quant_tag_of(f).as_deref() == Some(want.as_str()))
                .collect();
            matching.sort_by_key(|f| (f.len(), f.to_string()));
            match matching.first() {
                Some(f) => Ok(gguf_selection(f)),
                None => {
                    let mut available: Vec<String> =
                        ggufs.iter().filter_map(|f| quant_tag_of(f)).collect();
                    available.sort();
                    available.dedup();
                    Err(HubError::QuantNotFound {
                        repo: r.repo.clone(),
                        quant: q.clone(),
                        available,
                    })
                }
            }
        }
        HfSelect::Default => {
            let lower = |f: &String| f.to_ascii_lowercase();
            if files.iter().any(|f| lower(f).ends_with(".safetensors")) {
                let keep = |f: &&String| {
                    let l = lower(f);
                    let ext = l.rsplit_once('.').map_or("", |(_, e)| e);
                    !l.starts_with('.')
                        && !SKIPPED_EXTENSIONS.contains(&ext)
                        && !SKIPPED_FOLDERS.iter().any(|d| l.starts_with(d))
                };
                return Ok(Selection {
                    files: files.iter().filter(keep).cloned().collect(),
                    entry: None,
                });
            }
            let mut sorted = ggufs.clone();
            sorted.sort();
            let preferred = sorted
                .iter()
                .find(|f| quant_tag_of(f).as_deref() == Some("Q4_K_M"))
                .or(sorted.first());
            match preferred {
                Some(f) => Ok(gguf_selection(f)),
                None => Err(HubError::NoWeights {
                    repo: r.repo.clone(),
                    revision: r.revision.clone(),
                    files: files.to_vec(),
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(select: HfSelect) -> HfRef {
        HfRef {
            repo: "o/r".into(),
            revision: "main".into(),
            select,
        }
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn quant_tags_pick_files_and_split_parts() {
        let files = names(&[
            "README.md",
            "m-Q8_0.gguf",
            "m-Q4_K_M-00002-of-00002.gguf",
            "m-Q4_K_M-00001-of-00002.gguf",
            "mmproj-F16.gguf",
        ]);
        let s = select(&files, &r(HfSelect::Quant("q4_k_m".into()))).unwrap();
        assert_eq!(
            s.files,
            names(&[
                "m-Q4_K_M-00001-of-00002.gguf",
                "m-Q4_K_M-00002-of-00002.gguf"
            ])
        );
        assert_eq!(s.entry.as_deref(), Some("m-Q4_K_M-00001-of-00002.gguf"));
        let e = select(&files, &r(HfSelect::Quant("IQ2_XS".into())))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("IQ2_XS") && e.contains("available: Q4_K_M, Q8_0"),
            "{e}"
        );
        let s = select(&files, &r(HfSelect::Default)).unwrap();
        assert_eq!(s.entry.as_deref(), Some("m-Q4_K_M-00001-of-00002.gguf"));
    }

    #[test]
    fn projectors_pair_by_folder_then_tag() {
        let files = names(&[
            "m-Q4_K_M.gguf",
            "mmproj-BF16.gguf",
            "mmproj-F16.gguf",
            "mmproj-Q8_0.gguf",
            "sub/m-Q8_0.gguf",
            "sub/mmproj-Q8_0.gguf",
            "sub/mmproj-F32.gguf",
            "other/m-F16.gguf",
        ]);
        let pick = |entry: &str| projector_for(&files, entry);
        assert_eq!(pick("m-Q4_K_M.gguf").as_deref(), Some("mmproj-F16.gguf"));
        assert_eq!(
            pick("sub/m-Q8_0.gguf").as_deref(),
            Some("sub/mmproj-Q8_0.gguf")
        );
        assert_eq!(pick("other/m-F16.gguf"), None);
        let odd = names(&["m-Q4_0.gguf", "mmproj-model-q5_1.gguf", "mmproj-a.gguf"]);
        assert_eq!(
            projector_for(&odd, "m-Q4_0.gguf").as_deref(),
            Some("mmproj-a.gguf")
        );
        // A projector is never taken as the model's weights.
        let s = select(&files, &r(HfSelect::Quant("BF16".into())));
        assert!(s.is_err(), "{s:?}");
    }

    #[test]
    fn safetensors_repos_take_config_tokenizer_and_shards() {
        let files = names(&[
            ".gitattributes",
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "pytorch_model.bin",
            "tokenizer.json",
            "onnx/model.onnx",
            "README.md",
        ]);
        let s = select(&files, &r(HfSelect::Default)).unwrap();
        assert_eq!(s.entry, None);
        assert_eq!(
            s.files,
            names(&[
                "config.json",
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors",
                "model.safetensors.index.json",
                "tokenizer.json",
            ])
        );
    }

    #[test]
    fn a_repo_without_weights_says_so() {
        let files = names(&["README.md", "config.json"]);
        let e = select(&files, &r(HfSelect::Default))
            .unwrap_err()
            .to_string();
        assert!(e.contains("o/r@main has no model weights"), "{e}");
        assert!(e.contains("README.md, config.json"), "{e}");
    }
}
