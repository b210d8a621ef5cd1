//! Stable Diffusion 1.x / 2.x as diffusers lays it out: the CLIP text encoder and its BPE
//! tokenizer, the conditional UNet, the VAE decoder, the noise schedulers and the pipeline that
//! runs them. Every block is composed from [`crate::nn`] (linear layers, conv2d with a fused
//! GroupNorm/SiLU, the norms of [`crate::nn::conv_input_norm`], causal attention for CLIP) plus a
//! bidirectional attention of its own ([`attention`]).
//!
//! Activations are channels-last feature maps ([`FeatureMap`]: `[h * w, c]`), the layout of
//! [`crate::nn::conv2d`]; the pipeline's inputs and outputs are NCHW as diffusers gives them.

pub mod attention;
pub mod clip_text;
pub mod clip_tokenizer;
pub mod clip_vocab;
pub mod config;
pub mod conv;
pub mod error;
pub mod inpaint;
pub mod layers;
pub mod ldm;
pub mod ldm_config;
pub mod ldm_model_type;
pub mod lora;
pub mod pipeline;
pub mod pipeline_encode;
pub mod pipeline_sources;
pub mod quant_store;
pub mod resnet;
pub mod scheduler;
pub mod unet;
pub mod vae;
pub mod vae_encoder;
pub mod vae_tiling;

pub use clip_text::ClipTextModel;
pub use clip_tokenizer::ClipTokenizer;
pub use error::DiffusionError;
pub use layers::FeatureMap;
pub use lora::LoraSpec;
pub use pipeline::{
    image_seed, init_image_chw, GenerateRequest, Generated, PipelineSource, StableDiffusion,
};
pub use scheduler::{Scheduler, SchedulerKind};
pub use unet::UNet;
pub use vae::VaeDecoder;
pub use vae_encoder::VaeEncoder;
pub use vae_tiling::VaeTiling;
