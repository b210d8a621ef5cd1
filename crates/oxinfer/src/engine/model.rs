//! A loaded model: weights (GGUF file or safetensors folder), its configuration, tokenizer
//! and chat template.

use crate::arch::{self, CausalLm};
use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::config::{ConfigSource, ModelConfig};
use crate::error::{Error, LoadError, Result};
use crate::gguf::GgufFile;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::{Naming, WeightSource};
use crate::tokenizer::Tokenizer;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A model ready to run.
pub struct Model {
    path: PathBuf,
    config: ModelConfig,
    lm: Box<dyn CausalLm>,
    tokenizer: Option<Tokenizer>,
    template: Option<ChatTemplate>,
    source: WeightSource,
    load_time: Duration,
}

/// Summary of a model for `oxinfer info`.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub path: PathBuf,
    /// `gguf` or `safetensors`.
    pub container: &'static str,
    pub architecture: String,
    pub parameters: u64,
    /// Tensor count per storage format.
    pub formats: BTreeMap<String, usize>,
    pub file_size: u64,
    pub context_length: usize,
    pub has_chat_template: bool,
    pub has_tokenizer: bool,
    pub config: ModelConfig,
}

fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map(|_| &magic == b"GGUF")
        .unwrap_or(false)
}

impl Model {
    /// Loads a GGUF file, or a folder holding `config.json` and safetensors weights (plus
    /// optionally `tokenizer.json` and `tokenizer_config.json`), or a folder holding one GGUF.
    pub fn load(path: impl AsRef<Path>) -> Result<Model> {
        let path = path.as_ref();
        let t0 = Instant::now();
        let meta = std::fs::metadata(path).map_err(|e| LoadError::io(path, e))?;
        let mut model = if meta.is_file() {
            if is_gguf(path) || path.extension().is_some_and(|e| e == "gguf") {
                Self::load_gguf(path)?
            } else if path.extension().is_some_and(|e| e == "safetensors") {
                let dir = path.parent().unwrap_or(Path::new("."));
                Self::load_safetensors(dir, Some(path))?
            } else {
                return Err(LoadError::malformed(
                    path,
                    "not a GGUF file (bad magic) nor a .safetensors file",
                )
                .into());
            }
        } else if path.join("config.json").is_file() {
            Self::load_safetensors(path, None)?
        } else {
            let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| LoadError::io(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect();
            match ggufs.as_slice() {
                [one] => Self::load_gguf(one)?,
                [] => {
                    return Err(LoadError::malformed(
                        path,
                        "folder has neither config.json (safetensors model) nor a .gguf file",
                    )
                    .into())
                }
                _ => {
                    return Err(LoadError::malformed(
                        path,
                        "folder holds several .gguf files: pass one of them with -m",
                    )
                    .into())
                }
            }
        };
        model.load_time = t0.elapsed();
        Ok(model)
    }

    fn load_gguf(path: &Path) -> Result<Model> {
        let g = GgufFile::open(path)?;
        let config = ModelConfig::from_gguf(&g)?;
        let lm = arch::load(&config, &g, Naming::Gguf, &ConfigSource::Gguf(&g))?;
        let tokenizer = if g.get("tokenizer.ggml.tokens").is_some() {
            Some(
                Tokenizer::from_gguf(&g)
                    .map_err(|e| Error::Tokenizer(format!("{}: {e}", path.display())))?,
            )
        } else {
            None
        };
        let template = match tokenizer.as_ref().and_then(|t| t.chat_template()) {
            Some(src) => Some(Self::template(path, src, tokenizer.as_ref())?),
            None => None,
        };
        Ok(Model {
            path: path.to_path_buf(),
            config,
            lm,
            tokenizer,
            template,
            source: WeightSource::Gguf(g),
            load_time: Duration::ZERO,
        })
    }

    fn load_safetensors(dir: &Path, file: Option<&Path>) -> Result<Model> {
        let cfg_path = dir.join("config.json");
        let json = crate::config::read_config_json(&cfg_path)?;
        let config = ModelConfig::from_config_value(&cfg_path, &json)?;
        let st = SafetensorsModel::open(file.unwrap_or(dir))?;
        let src = ConfigSource::Json {
            path: &cfg_path,
            json: &json,
        };
        let lm = arch::load(&config, &st, Naming::Hf, &src)?;
        let tok_json = dir.join("tokenizer.json");
        let tok_cfg = dir.join("tokenizer_config.json");
        let tokenizer = if tok_json.is_file() {
            Some(
                Tokenizer::from_files(&tok_json, tok_cfg.is_file().then_some(tok_cfg.as_path()))
                    .map_err(|e| Error::Tokenizer(format!("{}: {e}", tok_json.display())))?,
            )
        } else {
            None
        };
        let template = match tokenizer.as_ref().and_then(|t| t.chat_template()) {
            Some(src) => Some(Self::template(&tok_cfg, src, tokenizer.as_ref())?),
            None => {
                let jinja = dir.join("chat_template.jinja");
                if jinja.is_file() {
                    let src =
                        std::fs::read_to_string(&jinja).map_err(|e| LoadError::io(&jinja, e))?;
                    Some(Self::template(&jinja, &src, tokenizer.as_ref())?)
                } else {
                    None
                }
            }
        };
        Ok(Model {
            path: dir.to_path_buf(),
            config,
            lm,
            tokenizer,
            template,
            source: WeightSource::Safetensors(st),
            load_time: Duration::ZERO,
        })
    }

    fn template(path: &Path, src: &str, tok: Option<&Tokenizer>) -> Result<ChatTemplate> {
        ChatTemplate::new(
            src,
            tok.and_then(|t| t.bos_token()),
            tok.and_then(|t| t.eos_token()),
        )
        .map_err(|e| Error::Template(format!("{}: {e}", path.display())))
    }

    /// The file or folder the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The network itself.
    pub fn lm(&self) -> &dyn CausalLm {
        self.lm.as_ref()
    }

    /// The tokenizer, when the model ships one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }

    /// The tokenizer, or an error saying the model has none.
    pub fn require_tokenizer(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            Error::Tokenizer(format!(
                "{}: the model has no tokenizer (no tokenizer.ggml.* metadata or tokenizer.json); \
                 pass token ids with --tokens",
                self.path.display()
            ))
        })
    }

    /// The chat template, when the model ships one.
    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    /// Time spent in [`Model::load`].
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Tokenizes `text`; BOS is prepended when `add_bos` is true and the text does not already
    /// start with the BOS token's text.
    pub fn tokenize(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let tok = self.require_tokenizer()?;
        let starts_with_bos = tok
            .bos_token()
            .is_some_and(|b| !b.is_empty() && text.starts_with(b));
        tok.encode(text, add_bos && !starts_with_bos)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Whether the model's metadata asks for a BOS token in front of prompts.
    pub fn adds_bos(&self) -> bool {
        self.tokenizer.as_ref().is_some_and(|t| t.add_bos_default())
    }

    /// Renders `messages` through the model's chat template.
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String> {
        let tpl = self.template.as_ref().ok_or_else(|| {
            Error::Template(format!(
                "{}: the model has no chat template; use --raw",
                self.path.display()
            ))
        })?;
        tpl.render(messages, add_generation_prompt, extra)
            .map_err(|e| Error::Template(e.to_string()))
    }

    /// The prompt token ids of a chat: rendered through the template, then tokenized (special
    /// tokens parsed; BOS added per the model's metadata unless the template wrote it).
    pub fn chat_tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let text = self.render_chat(messages, true, &serde_json::Value::Null)?;
        self.tokenize(&text, self.adds_bos())
    }

    /// A new generation session with an empty KV cache of at most `ctx` positions (`None`: the
    /// model's context length).
    pub fn session(&self, ctx: Option<usize>) -> super::Session<'_> {
        super::Session::new(self, ctx.unwrap_or(self.config.context_length))
    }

    /// What `oxinfer info` prints.
    pub fn info(&self) -> ModelInfo {
        let mut formats = BTreeMap::new();
        let mut parameters = 0u64;
        let (container, file_size) = match &self.source {
            WeightSource::Gguf(g) => {
                for t in g.tensors() {
                    *formats.entry(t.format.name().to_string()).or_insert(0) += 1;
                    parameters += t.dims.iter().product::<u64>();
                }
                ("gguf", g.file_size() as u64)
            }
            WeightSource::Safetensors(s) => {
                for (_, e) in s.entries() {
                    *formats.entry(e.dtype.clone()).or_insert(0) += 1;
                    parameters += e.shape.iter().product::<usize>() as u64;
                }
                ("safetensors", s.total_size() as u64)
            }
        };
        ModelInfo {
            path: self.path.clone(),
            container,
            architecture: self.config.arch.name().to_string(),
            parameters,
            formats,
            file_size,
            context_length: self.config.context_length,
            has_chat_template: self.template.is_some(),
            has_tokenizer: self.tokenizer.is_some(),
            config: self.config.clone(),
        }
    }
}
