//! Neural-network blocks that architectures compose: linear layers, embeddings, norms, RoPE,
//! attention with a KV cache, MLPs, and convolutions. Architectures call these, never kernels directly.

pub mod attention;
pub mod conv;
pub mod embedding;
pub mod encoder_act;
pub mod encoder_attention;
pub mod encoder_linear;
pub mod encoder_math;
pub mod exact_matmuls;
pub mod full_attention;
pub mod gated_delta;
pub mod layer_norm;
pub mod linear;
pub mod mlp;
pub mod moe;
pub mod mrope;
pub mod norm;
pub mod rope;
pub mod rope_rows;
pub mod self_attention;

pub use crate::backend::cpu_ref::conv::{
    conv2d_cpu, conv2d_cpu_images, conv_geom, conv_input_norm, ConvError,
};
pub use crate::plan::{KvCache, LayerCache, RecurrentState, SeqRows};
pub use attention::{attend_groups, attention, attention_cached};
pub use conv::{conv2d, conv2d_images};
pub use embedding::Embedding;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use mlp::GatedMlp;
pub use mrope::MRope;
pub use norm::RmsNorm;
pub use oxinfer_kernels::act::GateAct;
pub use oxinfer_kernels::attention::AttnShape;
pub use rope::Rope;
pub use rope_rows::RopeRows;
pub use self_attention::{AttentionShape, SelfAttention};
