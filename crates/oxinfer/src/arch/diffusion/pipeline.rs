//! The text-to-image pipeline over a diffusers folder (`model_index.json`, `text_encoder/`,
//! `tokenizer/`, `unet/`, `vae/`, `scheduler/`): encode the prompt and the negative prompt,
//! denoise the latents with classifier-free guidance, decode them with the VAE. Matches
//! diffusers' `StableDiffusionPipeline` given the same initial (and ancestral) noise.

use super::clip_text::{ClipTextConfig, ClipTextModel};
use super::clip_tokenizer::ClipTokenizer;
use super::inpaint::is_inpainting_unet;
use super::layers::{guidance_embedding, zip_apply, FeatureMap};
use super::ldm::{LdmPart, LdmStore};
use super::ldm_config;
use super::ldm_model_type::{InferredModel, SingleFileOptions};
use super::lora::{LoraFile, LoraSpec, LoraStore, LoraTarget};
pub use super::pipeline_sources::PipelineSource;
use super::pipeline_sources::{open_ldm, weights, Sources};
use super::quant_store::QuantizedStore;
use super::scheduler::{ScheduleConfig, Scheduler, SchedulerKind};
use super::unet::{UNet, UNetConfig};
use super::vae::{VaeConfig, VaeDecoder};
use super::vae_encoder::VaeEncoder;
use super::vae_tiling::{decode_tiled, VaeTiling};
use super::DiffusionError;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::TensorStore;
use crate::quant::Precision;
use std::path::{Path, PathBuf};

/// An image as [`GenerateRequest::init_image`] takes it: RGB (alpha dropped), `[3, H, W]` with
/// values `v / 255 · 2 − 1` in `[-1, 1]`, as diffusers' image processor normalizes it (the CLI's
/// `--init` file and the server's uploaded image alike).
pub fn init_image_chw(img: &image::DynamicImage) -> Vec<f32> {
    let rgb = img.to_rgb8();
    let (w, h) = (rgb.width() as usize, rgb.height() as usize);
    let mut chw = vec![0f32; 3 * w * h];
    for (p, px) in rgb.pixels().enumerate() {
        for c in 0..3 {
            chw[c * w * h + p] = f32::from(px[c]) / 255.0 * 2.0 - 1.0;
        }
    }
    chw
}

/// One text-to-image request: `batch` images of one prompt.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    /// What to draw.
    pub prompt: String,
    /// Empty for none (the unconditional embedding of "").
    pub negative_prompt: String,
    /// Denoising steps.
    pub steps: usize,
    /// Classifier-free guidance scale; guidance runs only above 1 (as diffusers). A UNet with
    /// `time_cond_proj_dim` (LCM) takes the embedding of `guidance_scale − 1` instead and runs
    /// once per step.
    pub guidance_scale: f32,
    /// Image width in pixels, a multiple of the VAE's scale (8).
    pub width: usize,
    /// Image height in pixels, a multiple of the VAE's scale (8).
    pub height: usize,
    /// The scheduler; `None` for the one `scheduler_config.json` names.
    pub scheduler: Option<SchedulerKind>,
    /// Images made at once, `N` below (at least 1): one UNet call per step runs all of them
    /// (`2N` images with guidance: the `N` negative prompts first, as diffusers'
    /// `num_images_per_prompt`).
    pub batch: usize,
    /// Seed of the noise made when none is given. Image `i` of a batch draws its noise from
    /// [`image_seed`]`(seed, i)` = `seed + i`, so it is the image a request of that seed and
    /// batch 1 makes.
    pub seed: u64,
    /// Initial latent noise, NCHW `[N, C, H/8, W/8]` (before the scheduler's scaling).
    pub init_noise: Option<Vec<f32>>,
    /// Ancestral noise, `[steps, N, C, H/8, W/8]`; entry `k` is used by the `k`-th step run
    /// (diffusers draws one `[N, C, H/8, W/8]` tensor a step).
    pub step_noise: Option<Vec<f32>>,
    /// Image-to-image: the starting image NCHW `[1, 3, H, W]`, values in `[-1, 1]`, the same
    /// for every image of a batch. The initial noise (each image's own) is then added to its
    /// latents at the level of the first step run.
    pub init_image: Option<Vec<f32>>,
    /// Image-to-image: how much of the schedule to run, in `(0, 1]`: the last
    /// `floor(steps · strength)` steps. With the LCM scheduler and an LCM-distilled UNet
    /// (`time_cond_proj_dim`), as diffusers' `LatentConsistencyModelImg2ImgPipeline`: all
    /// `steps` steps, picked among the first `floor(original_inference_steps · strength)`
    /// timesteps of the distillation schedule (at least `steps` of them).
    pub strength: f32,
    /// Image-to-image: the noise that samples the VAE posterior, `[1, C, H/8, W/8]` (one sample
    /// for the whole batch, as diffusers) or `[N, C, H/8, W/8]` (one per image).
    pub encode_noise: Option<Vec<f32>>,
    /// Whether the VAE decodes (and, for image to image, encodes) in tiles.
    pub vae_tiling: VaeTiling,
    /// Inpainting: the mask `[H, W]`, values in `[0, 1]` binarized at 0.5 (1 = repaint), with
    /// `init_image`. The latents start from the image's, noised to the first step run, when
    /// `strength < 1`, from pure noise at strength 1, as diffusers'
    /// `StableDiffusionInpaintPipeline`. An inpainting UNet ([`StableDiffusion::is_inpainting`])
    /// takes the mask and the masked image's latents; a plain one runs on the latents alone,
    /// which take the image's latents back where the mask keeps it after every step (noised to
    /// the next step's level with the initial noise: [`super::inpaint::LatentBlend`]).
    pub mask: Option<Vec<f32>>,
    /// Inpainting with an inpainting UNet: the noise that samples the VAE posterior of the
    /// masked image, `[1, C, H/8, W/8]` (one sample for the batch, as diffusers) or `[N, C, H/8,
    /// W/8]`. A plain UNet does not use the masked image.
    pub mask_encode_noise: Option<Vec<f32>>,
}

impl Default for GenerateRequest {
    /// One 512 × 512 image, 20 steps, guidance 7.5, the folder's scheduler, seed 0, strength
    /// 0.8.
    fn default() -> Self {
        GenerateRequest {
            prompt: String::new(),
            negative_prompt: String::new(),
            steps: 20,
            guidance_scale: 7.5,
            width: 512,
            height: 512,
            scheduler: None,
            batch: 1,
            seed: 0,
            init_noise: None,
            step_noise: None,
            init_image: None,
            strength: 0.8,
            encode_noise: None,
            vae_tiling: VaeTiling::Auto,
            mask: None,
            mask_encode_noise: None,
        }
    }
}

/// What a request produced: `images` images (the request's batch), in order.
pub struct Generated {
    /// How many images (`N`).
    pub images: usize,
    /// Final latents, NCHW `[N, C, H/8, W/8]`, before the VAE's scaling.
    pub latents: Vec<f32>,
    /// The VAE's output, NCHW `[N, 3, H, W]`, about `[-1, 1]`.
    pub image: Vec<f32>,
    /// Image width in pixels.
    pub width: usize,
    /// Image height in pixels.
    pub height: usize,
}

impl Generated {
    /// Image `i`'s VAE output, CHW `[3, H, W]`.
    ///
    /// # Panics
    /// `i >= self.images`.
    pub fn image_chw(&self, i: usize) -> &[f32] {
        assert!(i < self.images, "image {i} of {}", self.images);
        let n = 3 * self.width * self.height;
        &self.image[i * n..(i + 1) * n]
    }

    /// Image `i` as 8-bit RGB, row-major `[H, W, 3]`: `clamp(x / 2 + 0.5, 0, 1) · 255`, rounded.
    ///
    /// # Panics
    /// `i >= self.images`.
    pub fn rgb8(&self, i: usize) -> Vec<u8> {
        let image = self.image_chw(i);
        let hw = self.width * self.height;
        let mut out = Vec::with_capacity(hw * 3);
        for p in 0..hw {
            for c in 0..3 {
                let v = (image[c * hw + p] / 2.0 + 0.5).clamp(0.0, 1.0);
                out.push((v * 255.0).round() as u8);
            }
        }
        out
    }
}

/// A loaded Stable Diffusion pipeline.
pub struct StableDiffusion {
    pub tokenizer: ClipTokenizer,
    pub text_encoder: ClipTextModel,
    pub unet: UNet,
    pub vae: VaeDecoder,
    /// The VAE encoder, when the folder has its weights (image-to-image).
    pub vae_encoder: Option<VaeEncoder>,
    pub schedule: ScheduleConfig,
    /// The scheduler `scheduler_config.json` names (Euler when it names another class).
    pub default_scheduler: SchedulerKind,
    /// The class `scheduler_config.json` names when it is not implemented here (PNDM, LMS, ...),
    /// so front ends can say that Euler runs instead.
    pub unsupported_scheduler: Option<String>,
    /// The folder.
    pub path: PathBuf,
}

/// `v` when its length is `n`; an error naming `what` and `shape` otherwise.
fn checked_noise(
    v: &Option<Vec<f32>>,
    n: usize,
    what: &str,
    shape: &str,
) -> Result<Option<Vec<f32>>, DiffusionError> {
    match v {
        Some(v) if v.len() != n => Err(DiffusionError::Argument(format!(
            "{what} has {} values, expected {shape} = {n}",
            v.len()
        ))),
        other => Ok(other.clone()),
    }
}

/// The strength of an image-to-image request as the f64 Python reads from its shortest decimal
/// form (`0.7`, not the f32's `0.69999…`): diffusers' rules multiply it by a step count and
/// truncate, so the f32's value would run one step fewer (`10 · 0.7` → 6 instead of 7; LCM's
/// distillation schedule one timestep shorter).
///
/// # Errors
/// Outside `[0, 1]` (diffusers' check; 0 then leaves no step, the caller's error).
fn python_strength(strength: f32) -> Result<f64, DiffusionError> {
    if !(0.0..=1.0).contains(&strength) {
        return Err(DiffusionError::Argument(format!(
            "strength = {strength}: must be in (0, 1]"
        )));
    }
    Ok(strength.to_string().parse().unwrap_or(f64::from(strength)))
}

/// Steps an image-to-image request runs (diffusers' `StableDiffusionImg2ImgPipeline`):
/// `min(int(steps · strength), steps)` with the strength as [`python_strength`] reads it.
///
/// # Errors
/// A strength outside `(0, 1]` or one that leaves no step.
fn img2img_steps(steps: usize, strength: f32) -> Result<usize, DiffusionError> {
    let run = ((steps as f64 * python_strength(strength)?) as usize).min(steps);
    if run == 0 {
        return Err(DiffusionError::Argument(format!(
            "strength = {strength}: must be in (0, 1] and leave at least one of the {steps} \
             steps (steps · strength ≥ 1)"
        )));
    }
    Ok(run)
}

/// The seed of image `i` of a batch seeded with `seed`: `seed + i` (wrapping), so image `i`
/// is the image a request of that seed makes alone.
pub fn image_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_add(i as u64)
}

/// What a seed is mixed with for the ancestral (step) noise.
const STEP_NOISE_SEED: u64 = 0x5EED_0000_0000_0001;
/// What a seed is mixed with for the noise that samples the VAE posterior.
pub(super) const ENCODE_NOISE_SEED: u64 = 0xE4C0_DE00_0000_0001;
/// What a seed is mixed with for the noise that samples the masked image's VAE posterior.
pub(super) const MASK_ENCODE_NOISE_SEED: u64 = 0x3A5C_0000_0000_0001;

/// The seeded noise of a batch: for image `i`, `gaussian_noise(image_seed(seed, i) ^ mix,
/// chunks · n)` cut in `chunks` pieces of `n`; laid out `[chunks, images, n]` (piece `k` of
/// every image, then piece `k + 1`), as diffusers' per-step `[N, ...]` draws.
pub(super) fn batch_noise(seed: u64, mix: u64, images: usize, chunks: usize, n: usize) -> Vec<f32> {
    let each: Vec<Vec<f32>> = (0..images)
        .map(|i| gaussian_noise(image_seed(seed, i) ^ mix, chunks * n))
        .collect();
    let mut out = Vec::with_capacity(images * chunks * n);
    for k in 0..chunks {
        for e in &each {
            out.extend_from_slice(&e[k * n..(k + 1) * n]);
        }
    }
    out
}

/// Standard normal values from a seed (SplitMix64 and Box-Muller). Not torch's generator:
/// the same seed gives other noise than diffusers.
pub fn gaussian_noise(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        let (u1, u2) = (next().max(1e-300), next());
        let r = (-2.0 * u1.ln()).sqrt();
        let a = 2.0 * std::f64::consts::PI * u2;
        out.push((r * a.cos()) as f32);
        out.push((r * a.sin()) as f32);
    }
    out.truncate(n);
    out
}

impl StableDiffusion {
    /// Loads every component of the diffusers folder `dir`.
    ///
    /// # Errors
    /// A missing `model_index.json`, component folder, config or weight file; an unsupported
    /// configuration; a missing or misshapen tensor. Each names the file and field or tensor.
    pub fn load(dir: &Path) -> Result<Self, DiffusionError> {
        Self::assemble(Sources::folder(dir)?, None)
    }

    /// Loads from `source` with the UNet's linear and convolution weights quantized on load to
    /// `unet_quant` when given (rows that are not whole blocks of 32 stay as stored); returns
    /// what was inferred for [`PipelineSource::SingleFileInferred`].
    ///
    /// # Errors
    /// As the loader of `source`.
    pub fn open(
        source: PipelineSource,
        unet_quant: Option<Precision>,
    ) -> Result<(Self, Option<InferredModel>), DiffusionError> {
        Self::open_with(source, unet_quant, &[])
    }

    /// [`Self::open`] with the LoRA files `loras` fused into the UNet and the text encoder
    /// ([`super::lora`]), before any quantization.
    ///
    /// # Errors
    /// As [`Self::open`]; a LoRA file that does not open, has a key of no known form, shapes
    /// that do not fit, or a module that targets no weight of the model (each names the key).
    pub fn open_with(
        source: PipelineSource,
        unet_quant: Option<Precision>,
        loras: &[LoraSpec],
    ) -> Result<(Self, Option<InferredModel>), DiffusionError> {
        let (mut sources, model, inferred) = match source {
            PipelineSource::Folder(dir) => (Sources::folder(dir)?, None, None),
            PipelineSource::SingleFile { file, config } => {
                let model = open_ldm(file)?;
                let mut s = Sources::folder(config)?;
                if ldm_config::has_open_clip(&model) {
                    s.text_part = LdmPart::OpenClipText {
                        width: s.text_encoder.usize("hidden_size")?,
                    };
                }
                (s, Some(model), None)
            }
            PipelineSource::SingleFileInferred {
                file,
                tokenizer,
                options,
            } => {
                let model = open_ldm(file)?;
                let (s, inferred) = Sources::inferred(file, &model, tokenizer, options)?;
                (s, Some(model), Some(inferred))
            }
        };
        sources.unet_quant = unet_quant;
        sources.loras = loras.to_vec();
        Ok((Self::assemble(sources, model.as_ref())?, inferred))
    }

    /// Loads a single-file checkpoint in the original LDM layout (`model.diffusion_model.*`,
    /// `first_stage_model.*`, and `cond_stage_model.transformer.*` (SD 1.x's CLIP text encoder)
    /// or `cond_stage_model.model.*` (SD 2.x's OpenCLIP)), taking the configs, tokenizer and
    /// scheduler from the diffusers folder `config_dir` (its weight files are not read).
    ///
    /// # Errors
    /// As [`Self::load`], plus a file that is not an LDM checkpoint.
    pub fn load_single_file(file: &Path, config_dir: &Path) -> Result<Self, DiffusionError> {
        let source = PipelineSource::SingleFile {
            file,
            config: config_dir,
        };
        Ok(Self::open(source, None)?.0)
    }

    /// Loads a single-file LDM checkpoint of SD 1.x or SD 2.x (OpenCLIP text encoder) with its
    /// configs inferred from its tensors as diffusers' `from_single_file` does without a config
    /// ([`ldm_config::infer`], the model type's defaults for what the file cannot tell); the
    /// tokenizer is the folder `tokenizer_dir`'s when given, else the built-in CLIP tokenizer,
    /// padded as the family pads. Returns what was inferred, for front ends to report.
    ///
    /// # Errors
    /// As [`Self::load_single_file`], plus a file whose configs cannot be inferred (names the
    /// tensor), a vocabulary the built-in tokenizer does not fit.
    pub fn load_single_file_inferred(
        file: &Path,
        tokenizer_dir: Option<&Path>,
    ) -> Result<(Self, InferredModel), DiffusionError> {
        let source = PipelineSource::SingleFileInferred {
            file,
            tokenizer: tokenizer_dir,
            options: SingleFileOptions::default(),
        };
        let (sd, inferred) = Self::open(source, None)?;
        let inferred = inferred.ok_or_else(|| {
            DiffusionError::Argument("single-file loading returned no inferred model".into())
        })?;
        Ok((sd, inferred))
    }

    /// Builds the pipeline from `src`'s configs, with the weights of every component taken from
    /// `single` when given, else from the component folders.
    fn assemble(src: Sources, single: Option<&SafetensorsModel>) -> Result<Self, DiffusionError> {
        // The weights of one component: its folder's file, or its part of the single file.
        let store =
            |i: usize, part: LdmPart| -> Result<Box<dyn TensorStore + '_>, DiffusionError> {
                Ok(match (single, &src.folders) {
                    (Some(file), _) => Box::new(LdmStore { file, part }),
                    (None, Some(dirs)) => Box::new(weights(&dirs[i])?),
                    (None, None) => unreachable!("inferred configs come with a single file"),
                })
            };
        let loras = LoraFile::open_all(&src.loras)?;
        let te_cfg = ClipTextConfig::parse(&src.text_encoder)?;
        let te_base = store(0, src.text_part.clone())?;
        let te_store = LoraStore::new(&*te_base, &loras, LoraTarget::TextEncoder, None);
        let text_encoder = ClipTextModel::load(te_cfg, &te_store)?;
        te_store.check_all_fused()?;
        let unet_cfg = UNetConfig::parse(&src.unet)?;
        let part = LdmPart::Unet {
            layers_per_block: unet_cfg.layers_per_block,
            up_attn: unet_cfg.up_attn.clone(),
        };
        let unet_base = store(1, part.clone())?;
        let unet_store = LoraStore::new(&*unet_base, &loras, LoraTarget::Unet, Some(part));
        let unet = match src.unet_quant {
            Some(precision) => UNet::load(
                unet_cfg,
                &QuantizedStore {
                    base: &unet_store,
                    precision,
                },
            )?,
            None => UNet::load(unet_cfg, &unet_store)?,
        };
        unet_store.check_all_fused()?;
        let vae_cfg = VaeConfig::parse(&src.vae)?;
        let blocks = vae_cfg.block_out_channels.len();
        let vae_store = store(2, LdmPart::Vae { blocks })?;
        let vae_encoder = match vae_store.get("encoder.conv_in.weight") {
            Some(_) => Some(VaeEncoder::load(&vae_cfg, &*vae_store)?),
            None => None,
        };
        let vae = VaeDecoder::load(vae_cfg, &*vae_store)?;
        let sc = &src.scheduler;
        let schedule = ScheduleConfig::parse(sc)?;
        let class = sc.str_or("_class_name", "EulerDiscreteScheduler")?;
        let unsupported_scheduler = SchedulerKind::parse(class)
            .is_none()
            .then(|| class.to_string());
        let default_scheduler = SchedulerKind::parse(class).unwrap_or(SchedulerKind::Euler);
        let (unet_in, latent) = (unet.config.in_channels, vae.config.latent_channels);
        if unet_in != latent && !is_inpainting_unet(unet_in, latent) {
            return Err(DiffusionError::config(
                &src.unet.path,
                format!(
                    "field 'in_channels' = {unet_in} is neither the VAE's latent_channels = \
                     {latent} nor {} (an inpainting UNet)",
                    2 * latent + 1
                ),
            ));
        }
        if unet.config.out_channels != latent {
            return Err(DiffusionError::config(
                &src.unet.path,
                format!(
                    "field 'out_channels' = {} differs from the VAE's latent_channels = {latent}",
                    unet.config.out_channels
                ),
            ));
        }
        if text_encoder.config.hidden_size != unet.config.cross_attention_dim {
            return Err(DiffusionError::config(
                &src.unet.path,
                format!(
                    "field 'cross_attention_dim' = {} does not match the text encoder's hidden_size = {}",
                    unet.config.cross_attention_dim, text_encoder.config.hidden_size
                ),
            ));
        }
        Ok(StableDiffusion {
            tokenizer: src.tokenizer,
            text_encoder,
            unet,
            vae,
            vae_encoder,
            schedule,
            default_scheduler,
            unsupported_scheduler,
            path: src.dir,
        })
    }

    /// The text embeddings `[77, hidden]` of `text`.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<f32>, DiffusionError> {
        let ids = self.tokenizer.encode_padded(text)?;
        self.text_encoder.forward(&ids)
    }

    /// The steps a request runs by default: 4 with the LCM scheduler (diffusers' LCM
    /// pipeline's default), 20 otherwise.
    pub fn default_steps(&self) -> usize {
        if self.default_scheduler == SchedulerKind::Lcm {
            4
        } else {
            20
        }
    }

    /// The guidance scale of a request by default: 8.5 for a UNet with `time_cond_proj_dim`
    /// (diffusers' LCM pipeline's default), 7.5 otherwise.
    pub fn default_guidance(&self) -> f32 {
        if self.unet.config.time_cond_proj_dim.is_some() {
            8.5
        } else {
            7.5
        }
    }

    /// Whether the UNet is an inpainting one (it takes the mask and the masked image's latents
    /// besides the latents: 9 input channels for SD); its requests need `init_image` and `mask`.
    pub fn is_inpainting(&self) -> bool {
        is_inpainting_unet(
            self.unet.config.in_channels,
            self.vae.config.latent_channels,
        )
    }

    /// The image side, in pixels, the model was trained at (the UNet's `sample_size` times the
    /// VAE's scale: 512 for SD 1.x).
    pub fn native_size(&self) -> usize {
        self.unet.config.sample_size * self.vae.config.scale()
    }

    /// The latent shape `(channels, h, w)` of a `width × height` image.
    ///
    /// # Errors
    /// A size of 0 or not a multiple of the VAE's scale.
    pub fn latent_shape(
        &self,
        width: usize,
        height: usize,
    ) -> Result<(usize, usize, usize), DiffusionError> {
        let s = self.vae.config.scale();
        for (name, v) in [("width", width), ("height", height)] {
            if v == 0 || !v.is_multiple_of(s) {
                return Err(DiffusionError::Argument(format!(
                    "{name} = {v}: must be a positive multiple of {s}"
                )));
            }
        }
        Ok((self.vae.config.latent_channels, height / s, width / s))
    }

    /// Runs `req`, making its `batch` images; `on_step(i, steps, latents)` is called after each
    /// denoising step with the latents NCHW `[N, C, H/8, W/8]`.
    ///
    /// # Errors
    /// Bad sizes, steps, a batch of 0, or noise of the wrong length (each names the argument).
    pub fn generate(
        &self,
        req: &GenerateRequest,
        on_step: &mut dyn FnMut(usize, usize, &[f32]),
    ) -> Result<Generated, DiffusionError> {
        let (c, h, w) = self.latent_shape(req.width, req.height)?;
        let batch = req.batch;
        if batch == 0 {
            return Err(DiffusionError::Argument(
                "batch = 0: must be at least 1 image".into(),
            ));
        }
        // One image's latents, and the batch's.
        let n = c * h * w;
        let total = batch * n;
        let kind = req.scheduler.unwrap_or(self.default_scheduler);
        let inpainting = self.is_inpainting();
        // A mask to a plain UNet: diffusers' inpainting pipeline blends the image's latents in
        // after every step.
        let blending = req.mask.is_some() && !inpainting;
        if req.mask.is_some() && req.init_image.is_none() {
            return Err(DiffusionError::Argument(
                "a mask needs an init image (the image to inpaint)".into(),
            ));
        }
        if inpainting && (req.mask.is_none() || req.init_image.is_none()) {
            return Err(DiffusionError::Argument(format!(
                "an inpainting model (its UNet takes {} input channels: the latents, the mask and \
                 the masked image's latents) needs an init image and a mask",
                self.unet.config.in_channels
            )));
        }
        // An LCM-distilled UNet with the LCM scheduler is diffusers' LCM image-to-image
        // pipeline: the strength shortens the distillation schedule the steps are picked from.
        // Any other image-to-image (and inpainting) runs the last steps of the whole schedule.
        let lcm_i2i = req.init_image.is_some()
            && req.mask.is_none()
            && kind == SchedulerKind::Lcm
            && self.unet.config.time_cond_proj_dim.is_some();
        let strength = if lcm_i2i {
            python_strength(req.strength)?
        } else {
            1.0
        };
        let mut sched = Scheduler::with_strength(kind, self.schedule.clone(), req.steps, strength)?;
        let shape = format!("[{batch}, {c}, {h}, {w}]");
        let noise = checked_noise(&req.init_noise, total, "initial noise", &shape)?
            .unwrap_or_else(|| batch_noise(req.seed, 0, batch, 1, n));
        let steps_shape = format!("[{}, {batch}, {c}, {h}, {w}]", req.steps);
        let step_noise = checked_noise(
            &req.step_noise,
            total * req.steps,
            "step noise",
            &steps_shape,
        )?
        .or_else(|| {
            sched
                .needs_noise()
                .then(|| batch_noise(req.seed, STEP_NOISE_SEED, batch, req.steps, n))
        });
        let blend = match blending {
            true => Some(self.latent_blend(req, (c, h, w))?),
            false => None,
        };
        // Image-to-image starts at step `start`, from the image's latents noised to that level.
        let (start, mut latents) = match &req.init_image {
            None => {
                let sigma0 = sched.init_noise_sigma();
                (0, noise.iter().map(|v| v * sigma0).collect::<Vec<f32>>())
            }
            // All the steps run, from the image's latents noised to the first timestep.
            Some(image) if lcm_i2i => {
                let z = self.encode_image(image, req, (c, h, w))?;
                (0, sched.add_noise(&z, &noise, 0))
            }
            // Inpainting at strength 1 starts from pure noise (diffusers' `is_strength_max`).
            Some(_) if req.mask.is_some() && python_strength(req.strength)? == 1.0 => {
                let sigma0 = sched.init_noise_sigma();
                (0, noise.iter().map(|v| v * sigma0).collect())
            }
            Some(image) => {
                let run = img2img_steps(req.steps, req.strength)?;
                let start = req.steps - run;
                let z = match &blend {
                    Some(b) => sched.add_noise(&b.image, &noise, start),
                    None => {
                        sched.add_noise(&self.encode_image(image, req, (c, h, w))?, &noise, start)
                    }
                };
                (start, z)
            }
        };
        let inpaint = match inpainting {
            true => Some(self.inpaint_condition(req, (c, h, w))?),
            false => None,
        };
        // LCM-distilled UNets take the guidance scale as an embedding, without a second pass.
        let w_emb = self
            .unet
            .config
            .time_cond_proj_dim
            .map(|d| guidance_embedding(req.guidance_scale - 1.0, d));
        let w_emb = w_emb.as_deref();
        let cfg = req.guidance_scale > 1.0 && w_emb.is_none();
        let cond = self.encode_prompt(&req.prompt)?;
        // With guidance the UNet runs both branches as one batch of two images: the negative
        // prompt's (unconditional) text first, then the prompt's.
        let ctx = if cfg {
            let uncond = self.encode_prompt(&req.negative_prompt)?;
            if uncond.len() != cond.len() {
                return Err(DiffusionError::Argument(format!(
                    "negative prompt embeddings have {} values, the prompt's {}",
                    uncond.len(),
                    cond.len()
                )));
            }
            [uncond.repeat(batch), cond.repeat(batch)].concat()
        } else {
            cond.repeat(batch)
        };
        // The UNet's batch: the latents once, or twice with guidance (its two halves).
        let branches = if cfg { 2 } else { 1 };
        for i in start..sched.len() {
            let mut x = latents.clone();
            sched.scale_model_input(&mut x, i);
            let t = sched.timesteps[i];
            let x = x.repeat(branches);
            let xm = match &inpaint {
                Some(cond) => {
                    let x = cond.unet_input(&x, branches * batch)?;
                    FeatureMap::from_nchw(&x, branches * batch, 2 * c + 1, h, w)
                }
                None => FeatureMap::from_nchw(&x, branches * batch, c, h, w),
            };
            let mut pred = self.unet.forward_cond(&xm, t, &ctx, w_emb)?.to_chw();
            if cfg {
                let (pred_u, pred_c) = pred.split_at_mut(total);
                let g = req.guidance_scale;
                zip_apply(pred_u, pred_c, |u, c| *u += g * (c - *u));
                pred.truncate(total);
            }
            let k = i - start;
            let sn = step_noise.as_ref().map(|v| &v[k * total..(k + 1) * total]);
            // Every scheduler's update is element-wise (DPM-Solver++'s history too), so one step
            // over the batch's values is each image's step.
            latents = sched.step(&pred, i, &latents, sn)?;
            if let Some(b) = &blend {
                // The image's latents at the next step's level (unnoised after the last).
                match i + 1 < sched.len() {
                    true => b.apply(&mut latents, &sched.add_noise(&b.image, &noise, i + 1)),
                    false => b.apply(&mut latents, &b.image),
                }
            }
            on_step(i, sched.len(), &latents);
        }
        let mut image = Vec::with_capacity(batch * 3 * req.width * req.height);
        for z in latents.chunks_exact(n) {
            image.extend(self.decode(z, c, h, w, req.vae_tiling)?);
        }
        Ok(Generated {
            images: batch,
            latents,
            image,
            width: req.width,
            height: req.height,
        })
    }

    /// The VAE's image NCHW `[1, 3, H, W]` of latents NCHW `[1, c, h, w]` (divided by the
    /// scaling factor first), decoded in tiles as `tiling` says ([`Self::tiles_decode`]).
    pub fn decode(
        &self,
        latents: &[f32],
        c: usize,
        h: usize,
        w: usize,
        tiling: VaeTiling,
    ) -> Result<Vec<f32>, DiffusionError> {
        let k = self.vae.config.scaling_factor;
        let z: Vec<f32> = latents.iter().map(|v| v / k).collect();
        let z = FeatureMap::from_chw(&z, c, h, w);
        let out = if self.tiles_decode(h, w, tiling) {
            decode_tiled(&self.vae, &z, self.vae.config.tiles())?
        } else {
            self.vae.decode(&z)?
        };
        Ok(out.to_chw())
    }

    /// Whether latents of `h × w` are decoded in tiles under `tiling`: never with
    /// [`VaeTiling::Off`]; with [`VaeTiling::On`] when they are larger than one tile (the VAE's
    /// `sample_size` / 8); with [`VaeTiling::Auto`] when, also, the image has more than
    /// [`AUTO_TILE_PIXELS`](super::vae_tiling::AUTO_TILE_PIXELS) pixels.
    pub fn tiles_decode(&self, h: usize, w: usize, tiling: VaeTiling) -> bool {
        let larger = self.vae.config.tiles().needs_tiles(h, w);
        let s = self.vae.config.scale();
        tiling.tiles(larger, h * s * w * s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Python's `int(steps * strength)` on the strength's decimal value: 10 · 0.7 runs 7 steps
    /// (the f32 0.7 times 10 is 6.9999999), 4 · 0.75 runs 3; no step left or a strength out of
    /// range is an error naming it.
    #[test]
    fn img2img_steps_follow_python() {
        assert_eq!(img2img_steps(10, 0.7).unwrap(), 7);
        assert_eq!(img2img_steps(10, 0.3).unwrap(), 3);
        assert_eq!(img2img_steps(4, 0.75).unwrap(), 3);
        assert_eq!(img2img_steps(20, 1.0).unwrap(), 20);
        for (steps, strength) in [(4, 0.2f32), (4, 0.0), (4, 1.5), (4, -0.1)] {
            let e = img2img_steps(steps, strength).unwrap_err().to_string();
            assert!(e.contains("strength"), "{e}");
        }
    }
}
