//! Tensor names: the GGUF spelling (`blk.3.attn_q.weight`) is the engine's own; safetensors
//! checkpoints use transformers' spelling (`model.layers.3.self_attn.q_proj.weight`).

/// Which spelling a weight file uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Naming {
    Gguf,
    Hf,
}

/// transformers' names of per-layer tensors, by GGUF name.
const HF_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

impl Naming {
    /// Name of a model-level tensor given its GGUF name (`token_embd`, `output_norm`, `output`).
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

    /// Name of tensor `part` (GGUF spelling, e.g. `attn_q`) of layer `i`.
    pub fn layer(self, i: usize, part: &str) -> String {
        match self {
            Naming::Gguf => format!("blk.{i}.{part}.weight"),
            Naming::Hf => {
                let hf = HF_LAYER
                    .iter()
                    .find(|(g, _)| *g == part)
                    .map_or(part, |(_, h)| h);
                format!("model.layers.{i}.{hf}.weight")
            }
        }
    }
}
