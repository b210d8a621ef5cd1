//! The text-to-image pipeline over a diffusers folder (`model_index.json`, `text_encoder/`,
//! `tokenizer/`, `unet/`, `vae/`, `scheduler/`): encode the prompt and the negative prompt,
//! denoise the latents with classifier-free guidance, decode them with the VAE. Matches
//! diffusers' `StableDiffusionPipeline` given the same initial (and ancestral) noise.

use super::clip_text::{ClipTextConfig, ClipTextModel};
use super::clip_tokenizer::ClipTokenizer;
use super::config::JsonConfig;
use super::layers::FeatureMap;
use super::ldm::{LdmPart, LdmStore};
use super::scheduler::{ScheduleConfig, Scheduler, SchedulerKind};
use super::unet::{UNet, UNetConfig};
use super::vae::{VaeConfig, VaeDecoder};
use super::vae_encoder::VaeEncoder;
use super::DiffusionError;
use crate::loader::safetensors::SafetensorsModel;
use crate::loader::TensorStore;
use std::path::{Path, PathBuf};

/// One text-to-image request.
#[derive(Clone, Debug)]
pub struct GenerateRequest {
    pub prompt: String,
    /// Empty for none (the unconditional embedding of "").
    pub negative_prompt: String,
    pub steps: usize,
    /// Classifier-free guidance scale; guidance runs only above 1 (as diffusers).
    pub guidance_scale: f32,
    /// Image width in pixels, a multiple of the VAE's scale (8).
    pub width: usize,
    /// Image height in pixels, a multiple of the VAE's scale (8).
    pub height: usize,
    /// The scheduler; `None` for the one `scheduler_config.json` names.
    pub scheduler: Option<SchedulerKind>,
    /// Seed of the noise made when none is given.
    pub seed: u64,
    /// Initial latent noise, NCHW `[1, C, H/8, W/8]` (before the scheduler's scaling).
    pub init_noise: Option<Vec<f32>>,
    /// Ancestral noise, `[steps, 1, C, H/8, W/8]`; entry `k` is used by the `k`-th step run.
    pub step_noise: Option<Vec<f32>>,
    /// Image-to-image: the starting image NCHW `[1, 3, H, W]`, values in `[-1, 1]`. The initial
    /// noise is then added to its latents at the level of the first step run.
    pub init_image: Option<Vec<f32>>,
    /// Image-to-image: how much of the schedule to run (the last `floor(steps · strength)` steps).
    pub strength: f32,
    /// Image-to-image: the noise that samples the VAE posterior, `[1, C, H/8, W/8]`.
    pub encode_noise: Option<Vec<f32>>,
}

impl Default for GenerateRequest {
    /// 512 × 512, 20 steps, guidance 7.5, the folder's scheduler, seed 0, strength 0.8.
    fn default() -> Self {
        GenerateRequest {
            prompt: String::new(),
            negative_prompt: String::new(),
            steps: 20,
            guidance_scale: 7.5,
            width: 512,
            height: 512,
            scheduler: None,
            seed: 0,
            init_noise: None,
            step_noise: None,
            init_image: None,
            strength: 0.8,
            encode_noise: None,
        }
    }
}

/// What a request produced.
pub struct Generated {
    /// Final latents, NCHW `[1, C, H/8, W/8]`, before the VAE's scaling.
    pub latents: Vec<f32>,
    /// The VAE's output, NCHW `[1, 3, H, W]`, about `[-1, 1]`.
    pub image: Vec<f32>,
    pub width: usize,
    pub height: usize,
}

impl Generated {
    /// The image as 8-bit RGB, row-major `[H, W, 3]`: `clamp(x / 2 + 0.5, 0, 1) · 255`, rounded.
    pub fn rgb8(&self) -> Vec<u8> {
        let hw = self.width * self.height;
        let mut out = Vec::with_capacity(hw * 3);
        for p in 0..hw {
            for c in 0..3 {
                let v = (self.image[c * hw + p] / 2.0 + 0.5).clamp(0.0, 1.0);
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

/// `dir/name`, or an error naming the component when it is not a folder.
fn component(dir: &Path, name: &str) -> Result<PathBuf, DiffusionError> {
    let p = dir.join(name);
    if p.is_dir() {
        Ok(p)
    } else {
        Err(DiffusionError::Missing {
            path: p,
            what: format!("the pipeline's '{name}' component folder"),
        })
    }
}

/// The component's weights: `diffusion_pytorch_model.safetensors` or `model.safetensors`
/// (or their `.fp16` variants).
fn weights(dir: &Path) -> Result<SafetensorsModel, DiffusionError> {
    for name in [
        "diffusion_pytorch_model.safetensors",
        "model.safetensors",
        "diffusion_pytorch_model.fp16.safetensors",
        "model.fp16.safetensors",
    ] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(SafetensorsModel::open(&p)?);
        }
    }
    Err(DiffusionError::Missing {
        path: dir.to_path_buf(),
        what: "weights (diffusion_pytorch_model.safetensors or model.safetensors)".into(),
    })
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
        Self::load_from(dir, None)
    }

    /// Loads a single-file checkpoint in the original LDM layout (`model.diffusion_model.*`,
    /// `first_stage_model.*`, `cond_stage_model.transformer.*`; SD 1.x's CLIP text encoder),
    /// taking the configs, tokenizer and scheduler from the diffusers folder `config_dir` (its
    /// weight files are not read).
    ///
    /// # Errors
    /// As [`Self::load`], plus a file that is not an LDM checkpoint.
    pub fn load_single_file(file: &Path, config_dir: &Path) -> Result<Self, DiffusionError> {
        let model = SafetensorsModel::open(file)?;
        if !LdmStore::is_ldm(&model) {
            return Err(DiffusionError::config(
                file,
                "not an LDM checkpoint: no model.diffusion_model.* tensors",
            ));
        }
        Self::load_from(config_dir, Some(&model))
    }

    /// [`Self::load`] with the weights of every component taken from `single` when given.
    fn load_from(dir: &Path, single: Option<&SafetensorsModel>) -> Result<Self, DiffusionError> {
        // The weights of one component: its folder's file, or its part of the single file.
        let store =
            |sub: &Path, part: LdmPart| -> Result<Box<dyn TensorStore + '_>, DiffusionError> {
                Ok(match single {
                    Some(file) => Box::new(LdmStore { file, part }),
                    None => Box::new(weights(sub)?),
                })
            };
        let index = JsonConfig::read(&dir.join("model_index.json"))?;
        let class = index.str_or("_class_name", "StableDiffusionPipeline")?;
        if !matches!(
            class,
            "StableDiffusionPipeline" | "StableDiffusionImg2ImgPipeline"
        ) {
            return Err(DiffusionError::config(
                &index.path,
                format!(
                    "field '_class_name': '{class}' is not supported (StableDiffusionPipeline)"
                ),
            ));
        }
        let te_dir = component(dir, "text_encoder")?;
        let unet_dir = component(dir, "unet")?;
        let vae_dir = component(dir, "vae")?;
        let sched_dir = component(dir, "scheduler")?;
        let tokenizer = ClipTokenizer::load(&component(dir, "tokenizer")?)?;
        let te_cfg = ClipTextConfig::parse(&JsonConfig::read(&te_dir.join("config.json"))?)?;
        let text_encoder = ClipTextModel::load(te_cfg, &*store(&te_dir, LdmPart::TextEncoder)?)?;
        let unet_cfg = UNetConfig::parse(&JsonConfig::read(&unet_dir.join("config.json"))?)?;
        let part = LdmPart::Unet {
            layers_per_block: unet_cfg.layers_per_block,
            up_attn: unet_cfg.up_attn.clone(),
        };
        let unet = UNet::load(unet_cfg, &*store(&unet_dir, part)?)?;
        let vae_cfg = VaeConfig::parse(&JsonConfig::read(&vae_dir.join("config.json"))?)?;
        let blocks = vae_cfg.block_out_channels.len();
        let vae_store = store(&vae_dir, LdmPart::Vae { blocks })?;
        let vae_encoder = match vae_store.get("encoder.conv_in.weight") {
            Some(_) => Some(VaeEncoder::load(&vae_cfg, &*vae_store)?),
            None => None,
        };
        let vae = VaeDecoder::load(vae_cfg, &*vae_store)?;
        let sc = JsonConfig::read(&sched_dir.join("scheduler_config.json"))?;
        let schedule = ScheduleConfig::parse(&sc)?;
        let class = sc.str_or("_class_name", "EulerDiscreteScheduler")?;
        let unsupported_scheduler = SchedulerKind::parse(class)
            .is_none()
            .then(|| class.to_string());
        let default_scheduler = SchedulerKind::parse(class).unwrap_or(SchedulerKind::Euler);
        if text_encoder.config.hidden_size != unet.config.cross_attention_dim {
            return Err(DiffusionError::config(
                unet_dir.join("config.json"),
                format!(
                    "field 'cross_attention_dim' = {} does not match the text encoder's hidden_size = {}",
                    unet.config.cross_attention_dim, text_encoder.config.hidden_size
                ),
            ));
        }
        Ok(StableDiffusion {
            tokenizer,
            text_encoder,
            unet,
            vae,
            vae_encoder,
            schedule,
            default_scheduler,
            unsupported_scheduler,
            path: dir.to_path_buf(),
        })
    }

    /// The text embeddings `[77, hidden]` of `text`.
    pub fn encode_prompt(&self, text: &str) -> Result<Vec<f32>, DiffusionError> {
        let ids = self.tokenizer.encode_padded(text)?;
        self.text_encoder.forward(&ids)
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
        Ok((self.unet.config.in_channels, height / s, width / s))
    }

    /// Runs `req`; `on_step(i, steps, latents)` is called after each denoising step with the
    /// latents NCHW.
    ///
    /// # Errors
    /// Bad sizes, steps, or noise of the wrong length (each names the argument).
    pub fn generate(
        &self,
        req: &GenerateRequest,
        on_step: &mut dyn FnMut(usize, usize, &[f32]),
    ) -> Result<Generated, DiffusionError> {
        let (c, h, w) = self.latent_shape(req.width, req.height)?;
        let n = c * h * w;
        let kind = req.scheduler.unwrap_or(self.default_scheduler);
        let mut sched = Scheduler::new(kind, self.schedule.clone(), req.steps)?;
        let shape = format!("[1, {c}, {h}, {w}]");
        let noise = checked_noise(&req.init_noise, n, "initial noise", &shape)?
            .unwrap_or_else(|| gaussian_noise(req.seed, n));
        let steps_shape = format!("[{}, 1, {c}, {h}, {w}]", req.steps);
        let step_noise = checked_noise(&req.step_noise, n * req.steps, "step noise", &steps_shape)?
            .or_else(|| {
                sched
                    .needs_noise()
                    .then(|| gaussian_noise(req.seed ^ 0x5EED_0000_0000_0001, n * req.steps))
            });
        // Image-to-image starts at step `start`, from the image's latents noised to that level.
        let (start, mut latents) = match &req.init_image {
            None => {
                let sigma0 = sched.init_noise_sigma();
                (0, noise.iter().map(|v| v * sigma0).collect::<Vec<f32>>())
            }
            Some(image) => {
                let run = ((req.steps as f64 * f64::from(req.strength)) as usize).min(req.steps);
                if !(0.0..=1.0).contains(&req.strength) || run == 0 {
                    return Err(DiffusionError::Argument(format!(
                        "strength = {}: must be in (0, 1] and leave at least one of the {} steps \
                         (steps · strength ≥ 1)",
                        req.strength, req.steps
                    )));
                }
                let start = req.steps - run;
                let z = self.encode_image(image, req, n, &shape)?;
                (start, sched.add_noise(&z, &noise, start))
            }
        };
        let cfg = req.guidance_scale > 1.0;
        let cond = self.encode_prompt(&req.prompt)?;
        let uncond = if cfg {
            Some(self.encode_prompt(&req.negative_prompt)?)
        } else {
            None
        };
        for i in start..sched.len() {
            let mut x = latents.clone();
            sched.scale_model_input(&mut x, i);
            let xm = FeatureMap::from_chw(&x, c, h, w);
            let t = sched.timesteps[i];
            let pred_c = self.unet.forward(&xm, t, &cond)?.to_chw();
            let pred = match &uncond {
                Some(u) => {
                    let pred_u = self.unet.forward(&xm, t, u)?.to_chw();
                    pred_u
                        .iter()
                        .zip(&pred_c)
                        .map(|(&u, &c)| u + req.guidance_scale * (c - u))
                        .collect()
                }
                None => pred_c,
            };
            let k = i - start;
            let sn = step_noise.as_ref().map(|v| &v[k * n..(k + 1) * n]);
            latents = sched.step(&pred, i, &latents, sn)?;
            on_step(i, sched.len(), &latents);
        }
        let image = self.decode(&latents, c, h, w)?;
        Ok(Generated {
            latents,
            image,
            width: req.width,
            height: req.height,
        })
    }

    /// The latents of `image` (NCHW `[1, 3, H, W]` in `[-1, 1]`): the VAE posterior sampled
    /// with `req.encode_noise` (or the seed's), times the scaling factor. NCHW, `n` values.
    fn encode_image(
        &self,
        image: &[f32],
        req: &GenerateRequest,
        n: usize,
        shape: &str,
    ) -> Result<Vec<f32>, DiffusionError> {
        let enc = self
            .vae_encoder
            .as_ref()
            .ok_or_else(|| DiffusionError::Missing {
                path: self.path.join("vae"),
                what: "the VAE encoder's weights (encoder.*), needed for image-to-image".into(),
            })?;
        let (hh, ww) = (req.height, req.width);
        if image.len() != 3 * hh * ww {
            return Err(DiffusionError::Argument(format!(
                "init image has {} values, expected [1, 3, {hh}, {ww}]",
                image.len()
            )));
        }
        let post = enc.encode(&FeatureMap::from_chw(image, 3, hh, ww))?;
        let eps = checked_noise(&req.encode_noise, n, "encode noise", shape)?
            .unwrap_or_else(|| gaussian_noise(req.seed ^ 0xE4C0_DE00_0000_0001, n));
        let k = self.vae.config.scaling_factor;
        let (mean, std) = (post.mean.to_chw(), post.std.to_chw());
        Ok(mean
            .iter()
            .zip(&std)
            .zip(&eps)
            .map(|((&m, &s), &e)| (m + s * e) * k)
            .collect())
    }

    /// The VAE's image NCHW `[1, 3, H, W]` of latents NCHW `[1, c, h, w]` (divided by the
    /// scaling factor first).
    pub fn decode(
        &self,
        latents: &[f32],
        c: usize,
        h: usize,
        w: usize,
    ) -> Result<Vec<f32>, DiffusionError> {
        let k = self.vae.config.scaling_factor;
        let z: Vec<f32> = latents.iter().map(|v| v / k).collect();
        Ok(self
            .vae
            .decode(&FeatureMap::from_chw(&z, c, h, w))?
            .to_chw())
    }
}
