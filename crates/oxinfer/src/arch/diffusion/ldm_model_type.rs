//! The model type of a single-file checkpoint as diffusers 0.42's `infer_diffusers_model_type`
//! names it (`v1`, `v2`, `inpainting`, `inpainting_v2`), the hub repo its
//! `DIFFUSERS_DEFAULT_PIPELINE_PATHS` maps each to, and what the file cannot tell: diffusers
//! gives every SD 2.x file `stable-diffusion-2-1`'s v-prediction at 768 × 768 (a safetensors file
//! has no `global_step`, its only other hint), so an SD 2.x base (epsilon, 512) or SD-Turbo
//! (epsilon, 512, `trailing` timesteps) file needs the user to say so ([`SingleFileOptions`]).

use super::ldm_config::Family;
use super::scheduler::{Prediction, Spacing};

/// A single-file checkpoint's model type, named as diffusers names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelType {
    /// SD 1.x (`stable-diffusion-v1-5/stable-diffusion-v1-5`).
    V1,
    /// SD 2.x (`stabilityai/stable-diffusion-2-1`: v-prediction at 768 × 768).
    V2,
    /// SD 1.x inpainting: a UNet of 9 input channels (the latents, the mask, the masked image's
    /// latents; `stable-diffusion-v1-5/stable-diffusion-inpainting`).
    Inpainting,
    /// SD 2.x inpainting (`stabilityai/stable-diffusion-2-inpainting`: epsilon, 512 × 512).
    InpaintingV2,
}

impl ModelType {
    /// The type of a checkpoint of `family` whose UNet takes `unet_in_channels` channels:
    /// inpainting at 9 (diffusers' test), else the family's.
    pub fn of(family: Family, unet_in_channels: usize) -> Self {
        match (family, unet_in_channels == 9) {
            (Family::Sd1, false) => ModelType::V1,
            (Family::Sd2, false) => ModelType::V2,
            (Family::Sd1, true) => ModelType::Inpainting,
            (Family::Sd2, true) => ModelType::InpaintingV2,
        }
    }

    /// diffusers' name (`infer_diffusers_model_type`).
    pub fn name(self) -> &'static str {
        match self {
            ModelType::V1 => "v1",
            ModelType::V2 => "v2",
            ModelType::Inpainting => "inpainting",
            ModelType::InpaintingV2 => "inpainting_v2",
        }
    }

    /// The hub repo whose configs diffusers uses for it (`DIFFUSERS_DEFAULT_PIPELINE_PATHS`).
    pub fn hub_repo(self) -> &'static str {
        match self {
            ModelType::V1 => "stable-diffusion-v1-5/stable-diffusion-v1-5",
            ModelType::V2 => "stabilityai/stable-diffusion-2-1",
            ModelType::Inpainting => "stable-diffusion-v1-5/stable-diffusion-inpainting",
            ModelType::InpaintingV2 => "stabilityai/stable-diffusion-2-inpainting",
        }
    }

    /// The image side in pixels it was trained at (`DIFFUSERS_TO_LDM_DEFAULT_IMAGE_SIZE_MAP`).
    pub fn image_size(self) -> usize {
        match self {
            ModelType::V2 => 768,
            _ => 512,
        }
    }

    /// What the UNet predicts: diffusers' `_legacy_load_scheduler` without a `global_step`
    /// (v-prediction for `v2`, epsilon otherwise; the hub repos' scheduler configs agree).
    pub fn prediction(self) -> Prediction {
        match self {
            ModelType::V2 => Prediction::V,
            _ => Prediction::Epsilon,
        }
    }

    /// Whether its UNet is an inpainting one (9 input channels).
    pub fn is_inpainting(self) -> bool {
        matches!(self, ModelType::Inpainting | ModelType::InpaintingV2)
    }
}

/// What the user says about a single file that the file cannot tell (diffusers: the
/// `prediction_type` and `image_size` arguments of `from_single_file`, or another `config=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SingleFileOptions {
    /// What the UNet predicts (default: the model type's).
    pub prediction: Option<Prediction>,
    /// The image side in pixels it was trained at (default: the model type's); a multiple of
    /// the VAE's scale (8 for SD).
    pub image_size: Option<usize>,
    /// How the scheduler spaces its timesteps (default `linspace`; SD-Turbo: `trailing`).
    pub spacing: Option<Spacing>,
}

/// What was inferred for a single file and what was given, for front ends to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InferredModel {
    pub family: Family,
    pub model_type: ModelType,
    /// What the UNet predicts.
    pub prediction: Prediction,
    /// The image side in pixels (the default size of a request).
    pub image_size: usize,
    /// The scheduler's timestep spacing.
    pub spacing: Spacing,
    /// The options the user gave (the rest is inferred).
    pub options: SingleFileOptions,
    /// Whether the built-in CLIP tokenizer is used (else a given folder's).
    pub builtin_tokenizer: bool,
}

/// diffusers' name of a prediction type.
pub fn prediction_name(p: Prediction) -> &'static str {
    match p {
        Prediction::Epsilon => "epsilon",
        Prediction::V => "v_prediction",
    }
}

/// diffusers' name of a timestep spacing.
pub fn spacing_name(s: Spacing) -> &'static str {
    match s {
        Spacing::Linspace => "linspace",
        Spacing::Leading => "leading",
        Spacing::Trailing => "trailing",
    }
}

impl InferredModel {
    /// One line saying what was inferred, what was given, and what the file cannot tell.
    pub fn describe(&self) -> String {
        let family = match self.family {
            Family::Sd1 => "SD 1.x, CLIP text encoder",
            Family::Sd2 => "SD 2.x, OpenCLIP text encoder",
        };
        let given = |set: bool| if set { "given" } else { "default" };
        let o = &self.options;
        let mut s = format!(
            "configs inferred from the tensors: diffusers model type '{}' ({family}; the configs \
             of {}), {} ({}), {}x{} ({}), Euler with {} timesteps ({}), tokenizer: {}",
            self.model_type.name(),
            self.model_type.hub_repo(),
            prediction_name(self.prediction),
            given(o.prediction.is_some()),
            self.image_size,
            self.image_size,
            given(o.image_size.is_some()),
            spacing_name(self.spacing),
            given(o.spacing.is_some()),
            if self.builtin_tokenizer {
                "built-in CLIP"
            } else {
                "the given folder"
            },
        );
        if self.model_type == ModelType::V2 && o.prediction.is_none() {
            s.push_str(
                "; the file cannot tell SD 2.x 768-v from SD 2.x base or SD-Turbo (epsilon, \
                 512x512): say which if it is not 768-v",
            );
        }
        s
    }
}
