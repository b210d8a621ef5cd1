//! Options and helpers shared by the subcommands.

use crate::progress::stderr_is_tty;
use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::backend::DevicePref;
use oxinfer::engine::SamplingParams;
use oxinfer::hub::ollama::{OllamaLayers, OllamaParams};
use oxinfer::hub::KnownModel;
use oxinfer::quant::Precision;
use oxinfer::{LoadOptions, Model, Projector};
use std::path::PathBuf;

/// Model selection, threads and the compute device (shared by every command that loads a model).
#[derive(Args, Debug, Clone, Default)]
pub struct ModelArgs {
    /// A GGUF file, a safetensors folder, a model name (default: smollm2-135m-instruct),
    /// org/repo[:QUANT], org/repo/file.gguf, hf://org/repo@rev or ollama:name[:tag].
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// Print per-operation time, calls and achieved GB/s or GFLOP/s (stderr) at the end.
    #[arg(long)]
    pub profile: bool,
    /// Compute device: auto (a GPU when one works, else the CPU), cpu, cuda, or wgpu (aliases
    /// vulkan, metal).
    #[arg(long, default_value_t = oxinfer::backend::DevicePref::Auto)]
    pub device: oxinfer::backend::DevicePref,
    /// llama.cpp's -ngl: more than 0 asks for the GPU (all layers that run there do; without a
    /// usable GPU a line says why and the CPU runs), 0 keeps to the CPU.
    #[arg(
        long = "n-gpu-layers",
        visible_alias = "ngl",
        value_name = "N",
        conflicts_with = "device"
    )]
    pub n_gpu_layers: Option<u32>,
    /// Convert a safetensors model's weight matrices at load: bf16, q8 (32 int8 weights per
    /// f32 scale) or q4 (Q4_0-style: 32 4-bit weights per f16 scale). Default: as stored.
    #[arg(long, value_name = "bf16|q8|q4")]
    pub quant: Option<Precision>,
    #[command(flatten)]
    pub projector: ProjectorArgs,
    /// Say more on stderr: the device chosen and why, where the model comes from.
    #[arg(short = 'v', long)]
    pub verbose: bool,
}

/// Where a GGUF model's image / audio towers come from (llama.cpp's `mmproj-*.gguf` files).
#[derive(Args, Debug, Clone, Default)]
pub struct ProjectorArgs {
    /// llama.cpp's multimodal projector file (`mmproj-*.gguf`) with the image / audio towers
    /// of a GGUF model (Gemma 4, Qwen 3.5). Default: a model folder's one `mmproj*.gguf`; for
    /// a Hugging Face GGUF of those families, the repository's projector (fetched with it).
    #[arg(long, value_name = "FILE")]
    pub mmproj: Option<PathBuf>,
    /// No media towers from a projector file: neither a folder's `mmproj*.gguf` nor a Hugging
    /// Face repository's (which is then not fetched).
    #[arg(long, conflicts_with = "mmproj")]
    pub no_mmproj: bool,
}

/// The model as a positional argument (`oxinfer chat MODEL`), the same as `-m MODEL`.
#[derive(Args, Debug, Clone, Default)]
pub struct ModelPositional {
    /// The model, as with -m: a GGUF file, a safetensors folder or a model name.
    #[arg(id = "positional_model", value_name = "MODEL")]
    pub model: Option<String>,
}

impl ModelPositional {
    /// `args` with the positional model moved into `-m`; naming the model both ways is an error.
    pub fn merge_into(self, mut args: ModelArgs) -> Result<ModelArgs> {
        if let Some(m) = self.model {
            if let Some(flag) = &args.model {
                bail!("the model is named twice: -m {flag} and {m}; give one");
            }
            args.model = Some(m);
        }
        Ok(args)
    }
}

/// Context length, spelled as llama.cpp and Ollama users type it (`-c`, `--ctx-size`).
#[derive(Args, Debug, Clone, Default)]
pub struct CtxArgs {
    /// Context length in tokens (default: the model's).
    #[arg(
        short = 'c',
        long = "ctx",
        visible_alias = "ctx-size",
        value_name = "N"
    )]
    pub ctx: Option<usize>,
}

impl CtxArgs {
    /// `--ctx`, else the model's default (`num_ctx` of an Ollama model's params).
    pub fn or_model_default(&self, d: &OllamaParams) -> Option<usize> {
        self.ctx.or(d.num_ctx)
    }
}

impl ModelArgs {
    /// The device to ask the registry for, and whether the user asked for a GPU (then the
    /// device line is printed even when no GPU could be used).
    pub fn device_request(&self) -> (DevicePref, bool) {
        match self.n_gpu_layers {
            Some(0) => (DevicePref::Cpu, false),
            Some(_) => (DevicePref::Auto, true),
            None => (self.device, self.device.is_gpu()),
        }
    }

    /// Applies `--threads`, `--profile` and the device choice (before any model is loaded).
    pub fn prepare_runtime(&self) -> Result<()> {
        self.prepare_runtime_for(false)
    }

    /// [`Self::prepare_runtime`] for an encoder (embeddings, reranking): `auto` means a CUDA
    /// GPU when one works, else the CPU ([`crate::devices::select_for_encoder`]).
    #[cfg(feature = "server")]
    pub fn prepare_encoder_runtime(&self) -> Result<()> {
        self.prepare_runtime_for(true)
    }

    fn prepare_runtime_for(&self, encoder: bool) -> Result<()> {
        if let Some(n) = self.threads {
            anyhow::ensure!(n > 0, "--threads must be at least 1");
            oxinfer_kernels::set_num_threads(n);
        }
        oxinfer_kernels::profile::enable(self.profile);
        let (pref, gpu_asked) = self.device_request();
        match encoder {
            true => crate::devices::select_for_encoder(pref, gpu_asked || self.verbose)?,
            false => crate::devices::select(pref, gpu_asked || self.verbose)?,
        }
        Ok(())
    }

    /// Resolves (fetching the default model when needed) and loads the model.
    pub fn load(&self) -> Result<Model> {
        Ok(self.load_with_defaults()?.0)
    }

    /// [`Self::load`], with the generation defaults the model ships: an Ollama model's params
    /// layer (empty for every other model). An Ollama model's template layer becomes the chat
    /// template when the GGUF has none.
    pub fn load_with_defaults(&self) -> Result<(Model, OllamaParams)> {
        self.prepare_runtime()?;
        announce_fetch(self.model.as_deref());
        let mut progress = crate::progress::Bars::new();
        let path: PathBuf = oxinfer::hub::resolve_model(self.model.as_deref(), &mut progress)?;
        if self.verbose {
            eprintln!("model: {}", path.display());
        }
        // Mapping is instant, but building a large model touches its pages: show a spinner.
        let big = std::fs::metadata(&path).is_ok_and(|m| m.is_file() && m.len() > 256 << 20);
        let spinner = (big && stderr_is_tty()).then(|| {
            let s = indicatif::ProgressBar::new_spinner();
            s.set_message(format!("loading {}", path.display()));
            s.enable_steady_tick(std::time::Duration::from_millis(100));
            s
        });
        let mmproj = match &self.projector.mmproj {
            Some(file) => Projector::File(file.clone()),
            None if self.projector.no_mmproj => Projector::Off,
            None => hub_projector(self.model.as_deref(), &path, &mut progress)
                .map_or(Projector::FromFolder, Projector::Found),
        };
        let model = Model::load_with(
            &path,
            &LoadOptions {
                quant: self.quant,
                mmproj,
            },
        );
        if let Some(s) = spinner {
            s.finish_and_clear();
        }
        let mut model = model?;
        if let Some(r) = model.quant_report() {
            eprintln!("{}", r.summary());
        }
        let defaults = match ollama_layers(self.model.as_deref())? {
            Some((name, layers)) => apply_ollama_layers(&mut model, &name, layers, self.verbose)?,
            None => OllamaParams::default(),
        };
        Ok((model, defaults))
    }
}

/// The projector of a Hugging Face GGUF reference `spec` (resolved to the file `model`) whose
/// architecture takes towers from one (Gemma 4, Qwen 3.5), fetched beside it when missing; a
/// projector that cannot be had is a warning, and the model runs as a text model. Other
/// references cost nothing here (the GGUF is opened only for a Hub reference).
pub fn hub_projector(
    spec: Option<&str>,
    model: &std::path::Path,
    progress: &mut dyn oxinfer::hub::Progress,
) -> Option<PathBuf> {
    let r = spec.and_then(oxinfer::hub::hf_reference)?;
    if !model.is_file() {
        return None;
    }
    let arch = oxinfer::gguf::GgufFile::open(model).ok().and_then(|g| {
        g.architecture()
            .ok()
            .and_then(oxinfer::config::Arch::from_gguf)
    })?;
    if !oxinfer::arch::mmproj::takes_projector(arch) {
        return None;
    }
    let cfg = oxinfer::hub::hf::config::HfConfig::from_env();
    match oxinfer::hub::hf::resolve_projector(&r, &cfg, model, progress) {
        Ok(found) => found,
        Err(e) => {
            eprintln!(
                "warning: the repository's projector (mmproj) could not be had ({e}); the \
                 model runs without media towers"
            );
            None
        }
    }
}

/// The template, system and params layers of an `ollama:` reference; `None` for other models.
fn ollama_layers(spec: Option<&str>) -> Result<Option<(String, OllamaLayers)>> {
    let Some(spec) = spec.filter(|s| !std::path::Path::new(s).exists()) else {
        return Ok(None);
    };
    match oxinfer::hub::parse_reference(spec) {
        Ok(oxinfer::hub::ModelRef::Ollama(r)) => {
            let layers = oxinfer::hub::ollama::read_layers(&oxinfer::hub::ollama::store_dir(), &r)?;
            Ok(Some((r.to_string(), layers)))
        }
        _ => Ok(None),
    }
}

/// Uses an Ollama model's template layer as the chat template when the GGUF has none (a
/// template the translation does not support is reported and left out); returns its params.
fn apply_ollama_layers(
    model: &mut Model,
    name: &str,
    layers: OllamaLayers,
    verbose: bool,
) -> Result<OllamaParams> {
    if model.chat_template().is_none() {
        match layers.chat_template_jinja() {
            Some(Ok(jinja)) => {
                let origin = PathBuf::from(format!("{name} (Ollama's template layer)"));
                model.use_chat_template_if_absent(&origin, &jinja)?;
                if verbose {
                    eprintln!("chat template: {name}'s template layer (Go template, translated)");
                }
            }
            Some(Err(e)) => eprintln!(
                "note: {name}: the GGUF has no chat template and Ollama's template layer cannot \
                 be translated ({e}); chat needs a template"
            ),
            None => {}
        }
    }
    if verbose && !layers.params.ignored.is_empty() {
        eprintln!(
            "note: {name}: Ollama params not used: {}",
            layers.params.ignored.join(", ")
        );
    }
    Ok(layers.params)
}

/// The known model that `spec` (or the default) names when it is not in the cache yet.
pub fn uncached_known_model(spec: Option<&str>) -> Option<&'static KnownModel> {
    let spec = spec.unwrap_or(oxinfer::hub::DEFAULT_MODEL);
    if std::path::Path::new(spec).exists() {
        return None;
    }
    let model = oxinfer::hub::find_model(spec)?;
    let cached = std::fs::metadata(model.path_in(&oxinfer::hub::models_dir()))
        .is_ok_and(|m| m.is_file() && m.len() == model.size);
    (!cached).then_some(model)
}

/// Before a fetch, one line saying what is downloaded, how large it is and where it goes (on a
/// terminal a progress bar follows; nothing asks, so scripts never block).
fn announce_fetch(spec: Option<&str>) {
    if let Some(m) = uncached_known_model(spec) {
        eprintln!(
            "fetching {} ({}, {:.0} MiB) into {} (once)",
            m.name,
            m.description,
            m.size as f64 / 1048576.0,
            oxinfer::hub::models_dir().display()
        );
    }
}

/// Sampling options. A flag not given takes the model's default (an Ollama model's params
/// layer), else the value in its help.
#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy) [default: 0.8]
    #[arg(long, visible_alias = "temperature", value_name = "T")]
    pub temp: Option<f32>,
    /// Top-k (0 = off) [default: 40]
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Top-p (1 = off) [default: 0.95]
    #[arg(long, value_name = "P")]
    pub top_p: Option<f32>,
    /// Min-p (0 = off) [default: 0.05]
    #[arg(long, value_name = "P")]
    pub min_p: Option<f32>,
    /// Repetition penalty over the last 64 tokens (1 = off) [default: 1]
    #[arg(long, value_name = "X")]
    pub repeat_penalty: Option<f32>,
    /// Random seed (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl SamplingArgs {
    /// The sampling parameters: the flags given, else the model's defaults `d`, else the
    /// built-in ones.
    pub fn params_over(&self, d: &OllamaParams) -> SamplingParams {
        SamplingParams {
            temperature: self.temp.or(d.temperature).unwrap_or(0.8),
            top_k: self.top_k.or(d.top_k).unwrap_or(40),
            top_p: self.top_p.or(d.top_p).unwrap_or(0.95),
            min_p: self.min_p.or(d.min_p).unwrap_or(0.05),
            repeat_penalty: self.repeat_penalty.or(d.repeat_penalty).unwrap_or(1.0),
            seed: self.seed.or(d.seed).unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0)
            }),
            ..SamplingParams::default()
        }
    }
}

/// Prints the `--profile` table to stderr when profiling is on.
pub fn print_profile() {
    if oxinfer_kernels::profile::enabled() {
        eprint!("{}", oxinfer_kernels::profile::report());
        if let Some(s) = oxinfer::backend::active().and_then(|b| b.stats()) {
            eprint!("{s}");
        }
    }
}

/// Reads a whole text file, naming it on failure.
pub fn read_text(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{}: not valid UTF-8 text", path.display()))
}
