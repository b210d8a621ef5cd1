//! transformers' spelling of the engine's tensor names, once for every family: the GGUF name
//! (`blk.3.attn_q.weight`) is the engine's own; safetensors checkpoints use transformers'
//! (`model.layers.3.self_attn.q_proj.weight`). Per-layer parts every family spells alike are in
//! [`SHARED_LAYER`]; a family's own parts in its table ([`LLAMA_LAYER`], [`GEMMA_LAYER`]; Qwen 3.5's
//! DeltaNet and MoE parts in `qwen35`).

use crate::loader::Naming;

/// transformers' names of the per-layer parts every family spells the same way, by GGUF part
/// name (the name under `layers.{i}.`, without `.weight`).
pub const SHARED_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Llama and Qwen 2/3 (and Qwen 3.5's shared parts): `ffn_norm` is the norm after attention.
pub const LLAMA_LAYER: &[(&str, &str)] = &[("ffn_norm", "post_attention_layernorm")];

/// Gemma 3 and 4: `ffn_norm` is the pre-feed-forward norm, the post-norms have their own names.
pub const GEMMA_LAYER: &[(&str, &str)] = &[
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    // Gemma 4: the MoE block's norms and router, the per-layer-embedding block.
    ("pre_ffw_norm_2", "pre_feedforward_layernorm_2"),
    ("post_ffw_norm_1", "post_feedforward_layernorm_1"),
    ("post_ffw_norm_2", "post_feedforward_layernorm_2"),
    ("ffn_gate_inp", "router.proj"),
    ("inp_gate", "per_layer_input_gate"),
    ("proj", "per_layer_projection"),
    ("post_norm", "post_per_layer_input_norm"),
];

/// transformers' name (under `layers.{i}.`, without `.weight`) of GGUF layer part `part`: the
/// family's table `own` first, then [`SHARED_LAYER`]; parts in neither keep their name.
pub fn hf_layer_part<'a>(own: &[(&'a str, &'a str)], part: &'a str) -> &'a str {
    own.iter()
        .chain(SHARED_LAYER)
        .find(|(g, _)| *g == part)
        .map_or(part, |(_, h)| h)
}

impl Naming {
    /// Name of a model-level tensor given its GGUF name (`token_embd`, `output_norm`, `output`),
    /// Llama-style checkpoints.
    pub fn global(self, gguf: &str) -> String {
        match self {
            Naming::Gguf => format!("{gguf}.weight"),
            Naming::Hf => match gguf {
                "token_embd" => "model.embed_tokens.weight".into(),
                "output_norm" => "model.norm.weight".into(),
                "output" => "lm_head.weight".into(),
                other => format!("{other}.weight"),
            },
        }
    }

    /// Name of tensor `part` (GGUF spelling, e.g. `attn_q`) of layer `i`, Llama-style
    /// checkpoints ([`LLAMA_LAYER`]).
    pub fn layer(self, i: usize, part: &str) -> String {
        match self {
            Naming::Gguf => format!("blk.{i}.{part}.weight"),
            Naming::Hf => format!(
                "model.layers.{i}.{}.weight",
                hf_layer_part(LLAMA_LAYER, part)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The family table wins over the shared one (`ffn_norm` differs between Llama and Gemma);
    /// shared and unknown parts resolve the same for every family.
    #[test]
    fn family_table_then_shared() {
        assert_eq!(
            hf_layer_part(LLAMA_LAYER, "ffn_norm"),
            "post_attention_layernorm"
        );
        assert_eq!(
            hf_layer_part(GEMMA_LAYER, "ffn_norm"),
            "pre_feedforward_layernorm"
        );
        assert_eq!(hf_layer_part(GEMMA_LAYER, "attn_q"), "self_attn.q_proj");
        assert_eq!(
            hf_layer_part(LLAMA_LAYER, "layer_output_scale"),
            "layer_output_scale"
        );
        assert_eq!(
            Naming::Hf.layer(3, "attn_q"),
            "model.layers.3.self_attn.q_proj.weight"
        );
    }
}
