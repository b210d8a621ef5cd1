//! `oxinfer image`: text to image, image to image and inpainting with a Stable Diffusion 1.x /
//! 2.x diffusers folder or single file (LoRA files fused at load), written as a PNG; `.npy`
//! inputs and outputs for checking against diffusers.

use crate::npy;
use crate::progress::stderr_is_tty;
use anyhow::{bail, Context, Result};
use clap::Args;
use oxinfer::arch::diffusion::ldm_model_type::SingleFileOptions;
use oxinfer::arch::diffusion::scheduler::{Prediction, Spacing};
use oxinfer::arch::diffusion::{
    GenerateRequest, LoraSpec, PipelineSource, SchedulerKind, StableDiffusion, VaeTiling,
};
use std::path::{Path, PathBuf};

/// Most images `--batch` may ask for at once (each runs through every UNet call: memory grows
/// with the batch).
pub const MAX_BATCH: usize = 16;

/// Arguments of `oxinfer image`.
#[derive(Args, Debug)]
pub struct ImageArgs {
    /// A diffusers Stable Diffusion folder (model_index.json, text_encoder/, tokenizer/, unet/,
    /// vae/, scheduler/), or a single-file SD 1.x / 2.x checkpoint in the original LDM layout
    /// (its configs are inferred from its tensors unless --config is given).
    #[arg(short = 'm', long = "model")]
    pub model: PathBuf,
    /// With a single-file checkpoint: a diffusers folder of the same architecture whose configs,
    /// tokenizer and scheduler are used (its weights are not read).
    #[arg(long, value_name = "DIR")]
    pub config: Option<PathBuf>,
    /// With a single-file checkpoint and no --config: a CLIP tokenizer folder (vocab.json,
    /// merges.txt) instead of the built-in CLIP tokenizer.
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    pub tokenizer: Option<PathBuf>,
    /// With a single-file checkpoint and no --config: what the UNet predicts, which the file
    /// cannot tell (default: epsilon for SD 1.x, v_prediction for SD 2.x as stable-diffusion-2-1;
    /// SD 2.x base and SD-Turbo: epsilon).
    #[arg(long, value_name = "epsilon|v_prediction", conflicts_with = "config",
          value_parser = ["epsilon", "v_prediction"])]
    pub prediction_type: Option<String>,
    /// With a single-file checkpoint and no --config: the image side in pixels the model was
    /// trained at, the default --width/--height (default: 512; 768 for SD 2.x as
    /// stable-diffusion-2-1; SD 2.x base and SD-Turbo: 512).
    #[arg(long, value_name = "PIXELS", conflicts_with = "config")]
    pub image_size: Option<usize>,
    /// With a single-file checkpoint and no --config: the scheduler's timestep spacing (default
    /// linspace; SD-Turbo: trailing).
    #[arg(long, value_name = "linspace|leading|trailing", conflicts_with = "config",
          value_parser = ["linspace", "leading", "trailing"])]
    pub timestep_spacing: Option<String>,
    /// What to draw.
    #[arg(short = 'p', long)]
    pub prompt: String,
    /// What to steer away from (classifier-free guidance's negative prompt).
    #[arg(short = 'n', long = "negative", default_value = "")]
    pub negative: String,
    /// Denoising steps (default 20; 4 when the model's scheduler is LCM's).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Guidance scale; 1 or less turns guidance off (one UNet pass per step; SD-Turbo: 0). An
    /// LCM-distilled UNet takes it as an embedding instead (default 7.5; 8.5 for those).
    #[arg(long)]
    pub cfg: Option<f32>,
    /// euler, euler-a, ddim, dpm++2m or lcm (default: the one scheduler_config.json names).
    #[arg(long, value_name = "euler|euler-a|ddim|dpm++2m|lcm")]
    pub scheduler: Option<String>,
    /// Decode the latents (and encode the --init image) in tiles as diffusers'
    /// enable_vae_tiling(): auto (above 1024x1024 pixels), on (when larger than one tile, the
    /// VAE's sample_size) or off.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub vae_tiling: String,
    /// Image width in pixels, a multiple of 8 (default: the model's size, or the --init image's).
    #[arg(long)]
    pub width: Option<usize>,
    /// Image height in pixels, a multiple of 8 (default: the model's size, or the --init image's).
    #[arg(long)]
    pub height: Option<usize>,
    /// Image to image: start from this PNG (its size is the output's).
    #[arg(long, value_name = "IMAGE.png")]
    pub init: Option<PathBuf>,
    /// Inpainting: the mask PNG, the --init image's size; white (grey at least 128 after PIL's
    /// grayscale conversion) is repainted, black kept. An inpainting model (a UNet of 9 input
    /// channels) takes the mask; with a plain model the image's latents are put back where the
    /// mask keeps them after every step, as diffusers' inpainting pipeline does.
    #[arg(long, value_name = "MASK.png", requires = "init")]
    pub mask: Option<PathBuf>,
    /// Image to image: how much to change it, in (0, 1]: the last steps · strength steps run
    /// (an LCM-distilled model with the lcm scheduler runs all its steps, picked among the
    /// first original_inference_steps · strength timesteps, as diffusers' LCM img2img).
    #[arg(long, default_value_t = 0.8)]
    pub strength: f32,
    /// Seed of the initial (and ancestral) noise; image i of a batch uses seed + i (the image
    /// that seed makes alone).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Images to make at once (1 to 16), all of the prompt: one UNet call per step runs them
    /// all. More than one are written as OUT-1.png ... OUT-N.png.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub batch: usize,
    /// Output PNG (with --batch N > 1, the stem of the N files: out.png gives out-1.png ...).
    #[arg(short = 'o', long, default_value = "out.png")]
    pub output: PathBuf,
    /// Initial latent noise, float32 `.npy` `[N, 4, H/8, W/8]` (instead of the seed's; N is
    /// --batch).
    #[arg(long, value_name = "FILE.npy")]
    pub init_noise: Option<PathBuf>,
    /// Ancestral noise per step, float32 `.npy` `[steps, N, 4, H/8, W/8]`.
    #[arg(long, value_name = "FILE.npy")]
    pub step_noise: Option<PathBuf>,
    /// Image to image and inpainting: the noise that samples the VAE posterior of the --init
    /// image, float32 `.npy` `[1, 4, H/8, W/8]` (one sample for the batch, as diffusers) or
    /// `[N, 4, H/8, W/8]` (instead of the seed's).
    #[arg(long, value_name = "FILE.npy", requires = "init")]
    pub encode_noise: Option<PathBuf>,
    /// Inpainting with an inpainting model: the noise that samples the VAE posterior of the
    /// masked image, as --encode-noise (a plain model does not use the masked image).
    #[arg(long, value_name = "FILE.npy", requires = "mask")]
    pub mask_encode_noise: Option<PathBuf>,
    /// Write the final latents (before the VAE), NCHW float32 `[N, 4, H/8, W/8]`.
    #[arg(long, value_name = "FILE.npy")]
    pub dump_latents: Option<PathBuf>,
    /// Write the VAE's raw output (about [-1, 1]), NCHW float32 `[N, 3, H, W]`.
    #[arg(long, value_name = "FILE.npy")]
    pub dump_image: Option<PathBuf>,
    #[command(flatten)]
    pub lora: LoraArgs,
    /// Quantize the UNet's linear and convolution weights on load (q8: 32 int8 weights per f32
    /// scale; q4; bf16).
    #[arg(long, value_name = "q8|q4|bf16")]
    pub quant: Option<oxinfer::quant::Precision>,
    /// Worker threads (default: one per core).
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// Reads a noise file and checks its shape against `want`.
fn noise(path: &Option<PathBuf>, want: &[usize], flag: &str) -> Result<Option<Vec<f32>>> {
    let Some(p) = path else { return Ok(None) };
    let (shape, data) = npy::read_f32(p).with_context(|| format!("--{flag}"))?;
    if shape != want {
        bail!(
            "--{flag} {}: shape {shape:?}, expected {want:?}",
            p.display()
        );
    }
    Ok(Some(data))
}

/// The `--init` PNG as NCHW `[1, 3, H, W]` in `[-1, 1]`, with its width and height.
fn read_init(path: &std::path::Path) -> Result<(Vec<f32>, usize, usize)> {
    let img = ::image::open(path).with_context(|| format!("--init {}", path.display()))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    Ok((oxinfer::arch::diffusion::init_image_chw(&img), w, h))
}

/// The `--mask` PNG as `[H, W]` values in `[0, 1]` (the pipeline binarizes them at 0.5), with
/// its width and height: grayscale as PIL's `convert("L")` (`(19595 R + 38470 G + 7471 B +
/// 2^15) >> 16`; a gray image's own values; alpha ignored), divided by 255, as diffusers' mask
/// processor.
fn read_mask(path: &Path) -> Result<(Vec<f32>, usize, usize)> {
    let img = ::image::open(path).with_context(|| format!("--mask {}", path.display()))?;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let gray: Vec<u8> = match img {
        ::image::DynamicImage::ImageLuma8(g) => g.into_raw(),
        ::image::DynamicImage::ImageLumaA8(g) => g.pixels().map(|p| p[0]).collect(),
        other => other
            .to_rgb8()
            .pixels()
            .map(|p| {
                let [r, g, b] = p.0.map(u32::from);
                ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16) as u8
            })
            .collect(),
    };
    Ok((gray.iter().map(|&v| f32::from(v) / 255.0).collect(), w, h))
}

/// Reads an encode-noise file of `[1 or batch, c, h, w]`.
fn encode_noise(
    path: &Option<PathBuf>,
    (batch, c, h, w): (usize, usize, usize, usize),
    flag: &str,
) -> Result<Option<Vec<f32>>> {
    let Some(p) = path else { return Ok(None) };
    let (shape, data) = npy::read_f32(p).with_context(|| format!("--{flag}"))?;
    if shape != [1, c, h, w] && shape != [batch, c, h, w] {
        bail!(
            "--{flag} {}: shape {shape:?}, expected [1, {c}, {h}, {w}] or [{batch}, {c}, {h}, {w}]",
            p.display()
        );
    }
    Ok(Some(data))
}

/// LoRA files fused into a Stable Diffusion pipeline at load (`oxinfer image`, `oxinfer serve`).
#[derive(Args, Debug, Clone, Default)]
pub struct LoraArgs {
    /// A LoRA file (.safetensors, the kohya / A1111 or the diffusers / peft form) fused into the
    /// UNet and the text encoder at load; repeatable. LCM-LoRA: with --scheduler lcm --steps 4
    /// --cfg 1.
    #[arg(long, value_name = "FILE.safetensors")]
    pub lora: Vec<PathBuf>,
    /// The scale of each --lora in order (diffusers' lora_scale); one value applies to every
    /// --lora (default 1).
    #[arg(long, value_name = "F", requires = "lora")]
    pub lora_scale: Vec<f32>,
}

/// The LoRA files of `--lora` with their `--lora-scale`s (none: 1; one: for all).
fn lora_specs(a: &LoraArgs) -> Result<Vec<LoraSpec>> {
    let scales = &a.lora_scale;
    if scales.len() > 1 && scales.len() != a.lora.len() {
        bail!(
            "--lora-scale given {} times for {} --lora files: give one scale for all, or one per \
             file",
            scales.len(),
            a.lora.len()
        );
    }
    if let Some(p) = a.lora.iter().find(|p| !p.is_file()) {
        bail!("--lora {}: not a file", p.display());
    }
    Ok(a.lora
        .iter()
        .enumerate()
        .map(|(i, path)| LoraSpec {
            path: path.clone(),
            scale: scales.get(i).or(scales.first()).copied().unwrap_or(1.0),
        })
        .collect())
}

/// Opens the pipeline `source` (weights `quant`ized on load when asked, `loras` fused); a
/// single file whose configs are inferred from its tensors prints what was inferred, and its
/// errors say that `config_flag DIR` gives a diffusers folder's configs instead.
fn open_pipeline(
    source: PipelineSource,
    quant: Option<oxinfer::quant::Precision>,
    loras: &[LoraSpec],
    config_flag: &str,
) -> Result<StableDiffusion> {
    let inferring = matches!(source, PipelineSource::SingleFileInferred { .. });
    let (sd, inferred) = StableDiffusion::open_with(source, quant, loras).map_err(|e| {
        let e = anyhow::Error::from(e);
        if inferring {
            e.context(format!(
                "loading a single file with configs inferred from its tensors ({config_flag} \
                 DIR gives a diffusers folder's configs instead)"
            ))
        } else {
            e
        }
    })?;
    if let Some(m) = inferred {
        eprintln!("note: {}", m.describe());
    }
    Ok(sd)
}

/// The PNG file of image `i` (from 0) of `images`: `output` itself for one image, else
/// `output` with `-{i + 1}` after its stem (`out.png` → `out-1.png`, `out` → `out-1`).
fn output_path(output: &Path, i: usize, images: usize) -> PathBuf {
    if images == 1 {
        return output.to_path_buf();
    }
    let stem = output
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match output.extension() {
        Some(ext) => format!("{stem}-{}.{}", i + 1, ext.to_string_lossy()),
        None => format!("{stem}-{}", i + 1),
    };
    output.with_file_name(name)
}

/// The single-file options of `a` (what the file cannot tell).
fn single_file_options(a: &ImageArgs) -> SingleFileOptions {
    SingleFileOptions {
        prediction: a.prediction_type.as_deref().map(|p| match p {
            "v_prediction" => Prediction::V,
            _ => Prediction::Epsilon,
        }),
        image_size: a.image_size,
        spacing: a.timestep_spacing.as_deref().map(|s| match s {
            "leading" => Spacing::Leading,
            "trailing" => Spacing::Trailing,
            _ => Spacing::Linspace,
        }),
    }
}

/// Runs `oxinfer image`.
pub fn run(a: ImageArgs) -> Result<()> {
    if let Some(n) = a.threads {
        anyhow::ensure!(n > 0, "--threads must be at least 1");
        oxinfer_kernels::set_num_threads(n);
    }
    let batch = a.batch;
    if !(1..=MAX_BATCH).contains(&batch) {
        bail!("--batch {batch}: must be between 1 and {MAX_BATCH} images");
    }
    let scheduler = match &a.scheduler {
        None => None,
        Some(s) => Some(
            SchedulerKind::parse(s)
                .with_context(|| format!("--scheduler {s}: unknown ({})", SchedulerKind::NAMES))?,
        ),
    };
    let init = a.init.as_deref().map(read_init).transpose()?;
    let mask = a.mask.as_deref().map(read_mask).transpose()?;
    if let (Some((_, w, h)), Some((_, mw, mh)), Some(p)) = (&init, &mask, &a.mask) {
        if (w, h) != (mw, mh) {
            bail!(
                "--mask {} is {mw}x{mh}, the --init image {w}x{h}: they must be the same size",
                p.display()
            );
        }
    }
    let t0 = std::time::Instant::now();
    let options = single_file_options(&a);
    let source = if a.model.is_file() {
        match &a.config {
            Some(config) => PipelineSource::SingleFile {
                file: &a.model,
                config,
            },
            None => PipelineSource::SingleFileInferred {
                file: &a.model,
                tokenizer: a.tokenizer.as_deref(),
                options,
            },
        }
    } else {
        if a.tokenizer.is_some() || options != SingleFileOptions::default() {
            bail!(
                "--tokenizer, --prediction-type, --image-size and --timestep-spacing apply to a \
                 single-file checkpoint; {} is a folder (its own configs are used)",
                a.model.display()
            );
        }
        PipelineSource::Folder(&a.model)
    };
    let sd = open_pipeline(source, a.quant, &lora_specs(&a.lora)?, "--config")?;
    if sd.is_inpainting() && a.mask.is_none() {
        bail!(
            "{} is an inpainting model (its UNet takes {} input channels): give --init IMAGE \
             and --mask MASK.png (white = repaint)",
            a.model.display(),
            sd.unet.config.in_channels
        );
    }
    if let (None, Some(class)) = (scheduler, &sd.unsupported_scheduler) {
        eprintln!("note: {class} (scheduler_config.json) is not implemented; using euler (choose with --scheduler)");
    }
    let native = sd.native_size();
    let (width, height) = match &init {
        Some((_, w, h)) => {
            for (flag, given, own) in [("width", a.width, *w), ("height", a.height, *h)] {
                if given.is_some_and(|g| g != own) {
                    bail!(
                        "--{flag} {} differs from the --init image's {own}",
                        given.unwrap_or(0)
                    );
                }
            }
            (*w, *h)
        }
        None => (a.width.unwrap_or(native), a.height.unwrap_or(native)),
    };
    let (c, h, w) = sd.latent_shape(width, height)?;
    let steps = a.steps.unwrap_or_else(|| sd.default_steps());
    let req = GenerateRequest {
        prompt: a.prompt.clone(),
        negative_prompt: a.negative.clone(),
        steps,
        guidance_scale: a.cfg.unwrap_or_else(|| sd.default_guidance()),
        width,
        height,
        scheduler,
        batch,
        seed: a.seed,
        init_noise: noise(&a.init_noise, &[batch, c, h, w], "init-noise")?,
        step_noise: noise(&a.step_noise, &[steps, batch, c, h, w], "step-noise")?,
        init_image: init.map(|(img, _, _)| img),
        strength: a.strength,
        encode_noise: encode_noise(&a.encode_noise, (batch, c, h, w), "encode-noise")?,
        mask_encode_noise: encode_noise(
            &a.mask_encode_noise,
            (batch, c, h, w),
            "mask-encode-noise",
        )?,
        mask: mask.map(|(m, _, _)| m),
        vae_tiling: match a.vae_tiling.as_str() {
            "on" => VaeTiling::On,
            "off" => VaeTiling::Off,
            _ => VaeTiling::Auto,
        },
    };
    let loaded = t0.elapsed();
    let bar = stderr_is_tty().then(|| {
        indicatif::ProgressBar::new(steps as u64).with_style(
            indicatif::ProgressStyle::with_template(
                "steps [{bar:30}] {pos}/{len} {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        )
    });
    let t1 = std::time::Instant::now();
    let out = sd.generate(&req, &mut |_, _, _| {
        if let Some(b) = &bar {
            b.inc(1);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let took = t1.elapsed();
    if let Some(p) = &a.dump_latents {
        npy::write_f32(p, &[batch, c, h, w], &out.latents)
            .with_context(|| format!("{}", p.display()))?;
    }
    if let Some(p) = &a.dump_image {
        npy::write_f32(p, &[batch, 3, height, width], &out.image)
            .with_context(|| format!("{}", p.display()))?;
    }
    let mut written = Vec::with_capacity(out.images);
    for i in 0..out.images {
        let path = output_path(&a.output, i, out.images);
        ::image::RgbImage::from_raw(width as u32, height as u32, out.rgb8(i))
            .context("image buffer size")?
            .save_with_format(&path, ::image::ImageFormat::Png)
            .with_context(|| format!("{}", path.display()))?;
        written.push(path.display().to_string());
    }
    let what = match batch {
        1 => String::new(),
        n => format!("{n} images, "),
    };
    eprintln!(
        "wrote {} ({}x{}, {what}{} steps, load {:.2}s, generate {:.2}s = {:.2}s/step incl. VAE)",
        written.join(", "),
        width,
        height,
        steps,
        loaded.as_secs_f64(),
        took.as_secs_f64(),
        took.as_secs_f64() / steps.max(1) as f64
    );
    Ok(())
}

/// The Stable Diffusion model `-m` names, when it names one: a diffusers folder
/// (`model_index.json` inside) or a single-file LDM checkpoint.
#[cfg(feature = "server")]
pub fn pipeline_model(spec: Option<&str>) -> Option<PathBuf> {
    let path = PathBuf::from(spec?);
    let folder = path.join("model_index.json").is_file();
    (folder || oxinfer::arch::diffusion::ldm::LdmStore::is_ldm_file(&path)).then_some(path)
}

/// `oxinfer serve` on a Stable Diffusion folder or single file (its configs from
/// `--image-config DIR` or inferred, as `oxinfer image` loads it): `/v1/images/generations`
/// (text to image) and `/v1/images/edits` (image to image, inpainting; an inpainting model only
/// this); `config(model_id)` makes the server settings from the command line.
#[cfg(feature = "server")]
pub fn serve(
    a: &crate::serve::ServeArgs,
    path: &std::path::Path,
    listener: std::net::TcpListener,
    config: impl FnOnce(String) -> oxinfer_server::ServerConfig,
) -> Result<()> {
    a.model.prepare_runtime()?;
    let source = match (path.is_file(), &a.image_config) {
        (false, Some(_)) => bail!(
            "--image-config applies to a single-file checkpoint; {} is a folder (its own \
             configs are used)",
            path.display()
        ),
        (false, None) => PipelineSource::Folder(path),
        (true, Some(config)) => PipelineSource::SingleFile { file: path, config },
        (true, None) => PipelineSource::SingleFileInferred {
            file: path,
            tokenizer: None,
            options: SingleFileOptions::default(),
        },
    };
    let sd = open_pipeline(
        source,
        a.model.quant,
        &lora_specs(&a.lora)?,
        "--image-config",
    )?;
    if sd.is_inpainting() {
        eprintln!(
            "note: {} is an inpainting model: it serves POST /v1/images/edits with an image and \
             a mask; /v1/images/generations answers 400",
            path.display()
        );
    }
    // The folder's name, or the file's without its extension.
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let name = match path.is_file() {
        true => full.file_stem(),
        false => full.file_name(),
    };
    let model_id = name.map_or_else(
        || "image-model".into(),
        |s| s.to_string_lossy().into_owned(),
    );
    let cfg = config(model_id);
    eprintln!(
        "serving the image model {} ({side}x{side} native) on /v1/images/generations and \
         /v1/images/edits; chat, completion and embedding endpoints are not available",
        cfg.model_id,
        side = sd.native_size()
    );
    crate::serve::block_on_server(oxinfer_server::serve_images(
        listener,
        std::sync::Arc::new(sd),
        cfg,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_outputs_are_numbered_after_the_stem() {
        let p = |s: &str, i, n| output_path(Path::new(s), i, n).display().to_string();
        assert_eq!(p("out.png", 0, 1), "out.png");
        assert_eq!(p("out.png", 0, 3), "out-1.png");
        assert_eq!(p("dir/cat.v2.png", 2, 3), "dir/cat.v2-3.png");
        assert_eq!(p("/tmp/img", 1, 2), "/tmp/img-2");
    }
}
