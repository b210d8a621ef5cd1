//! A loaded model: weights (GGUF file or safetensors folder), its configuration, tokenizer
//! and chat template.

use crate::arch::{self, CausalLm};
use crate::chat_template::{ChatMessage, ChatTemplate};
use crate::clock::Instant;
use crate::config::{ConfigSource, ModelConfig};
use crate::error::{Error, LoadError, Result};
use crate::gguf::GgufFile;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::{Naming, TensorStore, TensorView, WeightSource};
use crate::quant::{self, Converted, Overlay, Precision, QuantReport};
use crate::tokenizer::{GuardedPrompt, Tokenizer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A model ready to run.
pub struct Model {
    path: PathBuf,
    config: ModelConfig,
    lm: Box<dyn CausalLm>,
    tokenizer: Option<Tokenizer>,
    template: Option<ChatTemplate>,
    source: WeightSource,
    /// Tensors converted at load (`--quant`), served over the file's.
    converted: Option<Converted>,
    /// The precision of the weights when chosen at load or recorded by a pre-quantized file.
    precision: Option<Precision>,
    load_time: Duration,
    /// Storage types of the keys and values of the caches `lm` makes.
    kv_types: crate::plan::KvTypes,
    /// The mmproj file the media towers came from ([`Model::attach_mmproj`]).
    mmproj: Option<PathBuf>,
    /// A Gemma 4 drafter reading this model's state ([`Model::attach_draft_head`]).
    draft_head: Option<crate::arch::gemma::gemma4_assistant::Gemma4Drafter>,
}

/// How to load a model.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Convert the weight matrices of a safetensors checkpoint to this precision at load
    /// (`None`: use them as stored). Refused for GGUF files.
    pub quant: Option<Precision>,
    /// Where a GGUF model's media towers come from (llama.cpp's `mmproj-*.gguf` files,
    /// [`crate::arch::mmproj`]).
    pub mmproj: Projector,
}

/// Where a GGUF model's media towers come from: llama.cpp's multimodal projector files
/// (`mmproj-*.gguf`). Safetensors checkpoints hold their towers in their folder: a projector
/// file is refused for them ([`Projector::File`]) or left alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Projector {
    /// A model folder's one `mmproj*.gguf`, if any; one that cannot be paired with the model
    /// leaves it a text model, with a warning.
    #[default]
    FromFolder,
    /// This file, which must pair with the model (`--mmproj`): an error otherwise.
    File(PathBuf),
    /// This file if it pairs with the model, else a warning and a text model (a Hub
    /// repository's projector, fetched beside the model).
    Found(PathBuf),
    /// None: a text model even when a projector is at hand (`--no-mmproj`).
    Off,
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
    /// The media the towers accept (`image`, `audio`, `video`); empty for a text model.
    pub media: Vec<&'static str>,
    /// The mmproj file the towers came from, for a GGUF model given one.
    pub mmproj: Option<PathBuf>,
}

/// Whether a `.gguf` file's name marks it as llama.cpp's multimodal projector (`mmproj*`).
fn is_mmproj_name(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.to_ascii_lowercase().starts_with("mmproj"))
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
        Self::load_with(path, &LoadOptions::default())
    }

    /// [`Model::load`] with options (on-load quantization).
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Model> {
        let path = path.as_ref();
        let t0 = Instant::now();
        // Kernel variants are chosen before any weight is packed or multiplied.
        crate::tuning::ensure();
        let meta = std::fs::metadata(path).map_err(|e| LoadError::io(path, e))?;
        // A model folder's one `mmproj*.gguf` (llama.cpp's repositories keep the towers there).
        let mut found_mmproj = None;
        let mut model = if meta.is_file() {
            if is_gguf(path) || path.extension().is_some_and(|e| e == "gguf") {
                Self::load_gguf(path, opts)?
            } else if path.extension().is_some_and(|e| e == "safetensors") {
                let dir = path.parent().unwrap_or(Path::new("."));
                Self::load_safetensors(dir, Some(path), opts)?
            } else {
                return Err(LoadError::malformed(
                    path,
                    "not a GGUF file (bad magic) nor a .safetensors file",
                )
                .into());
            }
        } else if path.join("config.json").is_file() {
            Self::load_safetensors(path, None, opts)?
        } else {
            let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(|e| LoadError::io(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect();
            let (projectors, ggufs): (Vec<PathBuf>, Vec<PathBuf>) =
                ggufs.into_iter().partition(|p| is_mmproj_name(p));
            if let [one] = projectors.as_slice() {
                found_mmproj = Some(one.clone());
            }
            match ggufs.as_slice() {
                [one] => Self::load_gguf(one, opts)?,
                [] => {
                    return Err(LoadError::malformed(
                        path,
                        "folder has neither config.json (safetensors model) nor a .gguf file",
                    )
                    .into())
                }
                // The parts of one split model: the first part opens them all.
                _ => match crate::gguf::split::first_part_of_set(&ggufs) {
                    Some(first) => Self::load_gguf(first, opts)?,
                    None => {
                        return Err(LoadError::malformed(
                            path,
                            "folder holds several .gguf files: pass one of them with -m",
                        )
                        .into())
                    }
                },
            }
        };
        let found = match &opts.mmproj {
            Projector::FromFolder => found_mmproj,
            Projector::Found(mm) => Some(mm.clone()),
            Projector::File(_) | Projector::Off => None,
        };
        if let Projector::File(mm) = &opts.mmproj {
            if !matches!(model.source, WeightSource::Gguf(_)) {
                return Err(LoadError::malformed(
                    mm,
                    format!(
                        "--mmproj pairs towers with a GGUF model; {} is a safetensors \
                         checkpoint, whose folder holds its towers",
                        model.path.display()
                    ),
                )
                .into());
            }
            model.attach_mmproj(mm)?;
        } else if let Some(mm) = found.filter(|_| matches!(model.source, WeightSource::Gguf(_))) {
            // Found, not asked for: towers this engine cannot pair with the model (another
            // family, a projector type not implemented) leave it a text model.
            if let Err(e) = model.attach_mmproj(&mm) {
                eprintln!(
                    "warning: {e}; the model runs without media towers (pass --mmproj to \
                     require them)"
                );
            }
        }
        model.load_time = t0.elapsed();
        Ok(model)
    }

    /// Gives the model the media towers of the mmproj file at `path`
    /// ([`LoadOptions::mmproj`]); token ids come from the model's vocabulary.
    pub fn attach_mmproj(&mut self, path: &Path) -> Result<()> {
        let tok = self.tokenizer.as_ref();
        let token_id = |text: &str| tok.and_then(|t| t.token_id(text));
        let pad_id = match &self.source {
            WeightSource::Gguf(g) => g
                .get_u64("tokenizer.ggml.padding_token_id")?
                .map(|v| v as u32),
            WeightSource::Safetensors(_) => None,
        };
        let text = crate::arch::mmproj::TextSide {
            arch: self.config.arch,
            token_id: &token_id,
            hidden: self.config.hidden_size,
            pad_id,
        };
        let mm = crate::arch::mmproj::Mmproj::open(path, &text)?;
        self.lm.attach_mmproj(&mm)?;
        self.mmproj = Some(path.to_path_buf());
        Ok(())
    }

    fn load_gguf(path: &Path, opts: &LoadOptions) -> Result<Model> {
        if let Some(p) = opts.quant {
            return Err(LoadError::malformed(
                path,
                format!(
                    "--quant {p} applies to safetensors checkpoints; a GGUF file's weights are \
                     already quantized and re-quantizing them would stack a second rounding \
                     error on the first (quantize the original safetensors checkpoint instead)"
                ),
            )
            .into());
        }
        Self::from_gguf(GgufFile::open(path)?)
    }

    /// Loads a GGUF file whose bytes are already in memory (a browser's `ArrayBuffer`, bytes
    /// made in a test); `name` stands for its path in messages and in [`Model::path`].
    pub fn load_gguf_bytes(name: &str, bytes: Vec<u8>) -> Result<Model> {
        let t0 = Instant::now();
        crate::tuning::ensure();
        let map = std::sync::Arc::new(crate::mapped::MappedFile::from_bytes(name, bytes));
        let mut model = Self::from_gguf(GgufFile::parse(Path::new(name), map)?)?;
        model.load_time = t0.elapsed();
        Ok(model)
    }

    /// The model of a parsed GGUF file: its configuration, network, tokenizer and template.
    fn from_gguf(g: GgufFile) -> Result<Model> {
        let path = g.path().to_path_buf();
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
            Some(src) => Some(Self::template(&path, src, tokenizer.as_ref())?),
            None => None,
        };
        Ok(Model {
            path,
            config,
            lm,
            tokenizer,
            template,
            source: WeightSource::Gguf(g),
            converted: None,
            precision: None,
            load_time: Duration::ZERO,
            kv_types: Default::default(),
            mmproj: None,
            draft_head: None,
        })
    }

    fn load_safetensors(dir: &Path, file: Option<&Path>, opts: &LoadOptions) -> Result<Model> {
        let cfg_path = dir.join("config.json");
        let json = crate::config::read_config_json(&cfg_path)?;
        if json.get("model_type").and_then(|v| v.as_str()) == Some("gemma4_assistant") {
            return Err(LoadError::malformed(
                &cfg_path,
                "is a Gemma 4 drafter (gemma4_assistant), which runs only beside its Gemma 4 \
                 target (arch::gemma::gemma4_assistant); it is not a model of its own",
            )
            .into());
        }
        let config = ModelConfig::from_config_value(&cfg_path, &json)?;
        let st = SafetensorsModel::open(file.unwrap_or(dir))?;
        let stored = match st.metadata(quant::METADATA_KEY) {
            Some(v) => Some(Precision::parse(v).ok_or_else(|| {
                LoadError::field(
                    st.path(),
                    format!(
                        "__metadata__ '{}' is '{v}', expected bf16, q8 or q4",
                        quant::METADATA_KEY
                    ),
                )
            })?),
            None => None,
        };
        let converted = match (opts.quant, stored) {
            (Some(want), Some(have)) if want != have => {
                return Err(LoadError::malformed(
                    st.path(),
                    format!(
                        "is a pre-quantized {have} checkpoint; --quant {want} would quantize its \
                         weights a second time (convert the original checkpoint instead)"
                    ),
                )
                .into())
            }
            (Some(want), None) => Some(quant::convert(&st, want)?),
            _ => None,
        };
        let src = ConfigSource::Json {
            path: &cfg_path,
            json: &json,
        };
        let store = Overlay::new(&st, converted.as_ref());
        let lm = arch::load(&config, &store, Naming::Hf, &src)?;
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
            precision: opts.quant.or(stored),
            converted,
            load_time: Duration::ZERO,
            kv_types: Default::default(),
            mmproj: None,
            draft_head: None,
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

    /// The model with every KV cache it makes storing keys and values in `types`
    /// (`--cache-type-k` / `--cache-type-v`; f32 unless asked).
    pub fn with_kv_types(mut self, types: crate::plan::KvTypes) -> Self {
        self.lm = arch::kv_typed::KvTyped::wrap(self.lm, types);
        self.kv_types = types;
        self
    }

    /// The types the model's KV caches store keys and values in.
    pub fn kv_types(&self) -> crate::plan::KvTypes {
        self.kv_types
    }

    /// Bytes of the KV cache per position and in total at `ctx` positions, in the model's
    /// [`Model::kv_types`].
    pub fn kv_footprint(&self, ctx: usize) -> arch::kv_typed::KvFootprint {
        arch::kv_typed::kv_footprint(&self.lm.plan(), self.kv_types, ctx)
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

    /// Takes `source` (a Jinja chat template; `origin` names where it came from in errors) as
    /// the chat template when the model has none of its own (an Ollama model's template layer
    /// beside a GGUF without `tokenizer.chat_template`). Returns whether it was taken.
    pub fn use_chat_template_if_absent(&mut self, origin: &Path, source: &str) -> Result<bool> {
        if self.template.is_some() {
            return Ok(false);
        }
        self.template = Some(Self::template(origin, source, self.tokenizer.as_ref())?);
        Ok(true)
    }

    /// The weights' precision when chosen at load (`--quant`) or recorded by a pre-quantized
    /// checkpoint; `None` when they are used as the file stores them without such a record.
    pub fn precision(&self) -> Option<Precision> {
        self.precision
    }

    /// What on-load conversion did, when it ran.
    pub fn quant_report(&self) -> Option<&QuantReport> {
        self.converted.as_ref().map(|c| &c.report)
    }

    /// Every weight tensor as the model uses it (converted ones in their new format), by
    /// checkpoint name (a pre-quantized pair `X.q8` + `X.q8s` is one tensor `X`); safetensors
    /// checkpoints only (`None` for GGUF).
    pub fn weight_tensors(&self) -> Option<Result<Vec<TensorView>>> {
        let WeightSource::Safetensors(st) = &self.source else {
            return None;
        };
        let store = Overlay::new(st, self.converted.as_ref());
        let mut names: Vec<&str> = st
            .entries()
            .map(|(n, _)| n.as_str())
            .filter(|n| !n.starts_with(quant::writer::PAD_PREFIX))
            .map(|n| {
                [".q8", ".q8s", ".q4", ".q4s"]
                    .iter()
                    .find_map(|s| n.strip_suffix(s))
                    .unwrap_or(n)
            })
            .collect();
        names.sort_unstable();
        names.dedup();
        Some(
            names
                .into_iter()
                .map(|n| store.require(n).map_err(Error::from))
                .collect(),
        )
    }

    /// Writes the model's weights, in the precision they were loaded in, as a pre-quantized
    /// checkpoint in `out` (see [`crate::quant`]), copying config and tokenizer files.
    ///
    /// # Errors
    /// A GGUF model (not supported: see [`LoadOptions::quant`]); a model loaded without a
    /// precision (nothing to save); I/O errors.
    pub fn save_quantized(
        &self,
        out: &Path,
        opts: &quant::WriteOptions,
    ) -> Result<quant::WriteReport> {
        let precision = self.precision.ok_or_else(|| {
            Error::Request(format!(
                "{}: loaded at its stored precision; choose one with --quant bf16|q8|q4 to save it",
                self.path.display()
            ))
        })?;
        let tensors = self.weight_tensors().ok_or_else(|| {
            Error::Request(format!(
                "{}: saving a GGUF model as a pre-quantized checkpoint is not supported (its \
                 weights are already quantized; start from the safetensors checkpoint)",
                self.path.display()
            ))
        })??;
        Ok(quant::write(out, &self.path, &tensors, precision, opts)?)
    }

    /// Time spent in [`Model::load`].
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Tokenizes `text`; BOS is prepended when `add_bos` is true and the text does not already
    /// start with the BOS token's text. Special-token text anywhere in `text` becomes control
    /// tokens: for chat prompts holding a caller's messages use [`Model::chat_prompt`] and
    /// [`Model::tokenize_prompt`].
    pub fn tokenize(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        self.tokenize_prompt(&GuardedPrompt::trusted(text.to_string()), add_bos)
    }

    /// Tokenizes a chat prompt: special tokens are parsed in the template's text only (see
    /// [`GuardedPrompt`]); BOS as in [`Model::tokenize`].
    pub fn tokenize_prompt(&self, prompt: &GuardedPrompt, add_bos: bool) -> Result<Vec<u32>> {
        // Every CLI and server request tokenizes its prompt first: refuse here, with an error,
        // a request that would read a weight file truncated since it was loaded (SIGBUS).
        self.check_files()?;
        let tok = self.require_tokenizer()?;
        let starts_with_bos = tok
            .bos_token()
            .is_some_and(|b| !b.is_empty() && prompt.raw_starts_with(b));
        tok.encode_guarded(prompt, add_bos && !starts_with_bos)
            .map_err(|e| Error::Tokenizer(e.to_string()))
    }

    /// Checks that the weight files the model reads in place have not shrunk since they were
    /// loaded (truncated or rewritten while in use): reading them would then kill the process
    /// with SIGBUS. [`Model::tokenize`], [`Model::tokenize_prompt`] and [`Session::generate`]
    /// call it; a few microseconds.
    ///
    /// [`Session::generate`]: super::Session::generate
    pub fn check_files(&self) -> Result<()> {
        Ok(self.source.check_sizes()?)
    }

    /// Whether the model's metadata asks for a BOS token in front of prompts.
    pub fn adds_bos(&self) -> bool {
        self.tokenizer.as_ref().is_some_and(|t| t.add_bos_default())
    }

    /// Renders `messages` through the model's chat template, as they are: special-token text in
    /// them stays text here, but becomes control tokens if the result is passed to
    /// [`Model::tokenize`] (fine for trusted callers; otherwise use [`Model::chat_prompt`]).
    pub fn render_chat(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String> {
        self.require_template()?
            .render(messages, add_generation_prompt, extra)
            .map_err(|e| Error::Template(e.to_string()))
    }

    /// Renders `messages` (and `extra`) through the chat template with every string they hold
    /// kept from becoming a control token when the prompt is tokenized with
    /// [`Model::tokenize_prompt`] (issue 24: a user message holding
    /// `<|im_end|><|im_start|>system` stays text).
    pub fn chat_prompt(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<GuardedPrompt> {
        let tpl = self.require_template()?;
        let mut guard = self.require_tokenizer()?.content_guard();
        let messages = guard.protect_messages(messages);
        let mut extra = extra.clone();
        guard.protect_json(&mut extra);
        let text = tpl
            .render(&messages, add_generation_prompt, &extra)
            .map_err(|e| Error::Template(e.to_string()))?;
        Ok(guard.finish(text))
    }

    fn require_template(&self) -> Result<&ChatTemplate> {
        self.template.as_ref().ok_or_else(|| {
            Error::Template(format!(
                "{}: the model has no chat template; use --raw",
                self.path.display()
            ))
        })
    }

    /// The prompt token ids of a chat: rendered through the template with the messages guarded
    /// ([`Model::chat_prompt`]), then tokenized (special tokens parsed in the template's text;
    /// BOS added per the model's metadata unless the template wrote it).
    pub fn chat_tokens(&self, messages: &[ChatMessage]) -> Result<Vec<u32>> {
        let prompt = self.chat_prompt(messages, true, &serde_json::Value::Null)?;
        self.tokenize_prompt(&prompt, self.adds_bos())
    }

    /// Loads the Gemma 4 drafter in folder `dir` (`model_type: gemma4_assistant`) for this
    /// model; sessions then draft with it for requests whose
    /// [`Speculation::draft_max`](super::Speculation::draft_max) is set.
    ///
    /// # Errors
    /// This model is not a Gemma 4 text model, or the drafter does not load or fit it.
    pub fn attach_draft_head(&mut self, dir: &Path) -> Result<()> {
        let target = self.lm.as_gemma4().ok_or_else(|| {
            Error::Request(format!(
                "{} is a Gemma 4 drafter, but the model is {}, not Gemma 4",
                dir.display(),
                self.config.arch.name()
            ))
        })?;
        let head = crate::arch::gemma::gemma4_assistant::Gemma4Drafter::load(dir, target)?;
        self.draft_head = Some(head);
        Ok(())
    }

    /// The Gemma 4 drafter attached with [`Model::attach_draft_head`] and the target it reads.
    pub fn draft_head(&self) -> Option<crate::engine::speculative::draft_head::DraftHead<'_>> {
        Some(crate::engine::speculative::draft_head::DraftHead {
            drafter: self.draft_head.as_ref()?,
            target: self.lm.as_gemma4()?,
        })
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
                // As the model uses them: converted or pre-quantized matrices by their format.
                for t in self.weight_tensors().into_iter().flatten().flatten() {
                    *formats.entry(t.format.name().to_string()).or_insert(0) += 1;
                    parameters += t.numel() as u64;
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
            media: self
                .lm
                .media()
                .map(|m| {
                    crate::arch::multimodal::MediaKind::ALL
                        .into_iter()
                        .filter(|&k| m.accepts(k))
                        .map(|k| k.name())
                        .collect()
                })
                .unwrap_or_default(),
            mmproj: self.mmproj.clone(),
        }
    }
}
