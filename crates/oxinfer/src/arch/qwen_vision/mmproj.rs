//! Qwen 3.5's vision tower from llama.cpp's mmproj file (projector type `qwen3vl_merger`): the
//! inverse of its converter (`Qwen3VLVisionModel`): tensor names back to transformers', and the
//! two temporal slices of the patch embedding (`v.patch_embd.weight`, `.weight.1`) back into
//! one `[hidden, 3, 2, p, p]` kernel.
//!
//! What the file does not store comes from the tensors' shapes (position table, merger
//! widths, temporal patch) and from the text model (the vision token ids by their text); the
//! tower's RoPE θ is transformers' fixed 10,000. Deepstack layers (Qwen3-VL, not Qwen 3.5) are
//! refused by the tower's configuration.

use crate::arch::mmproj::{require_u64, TextSide, Translated};
use crate::error::LoadError;
use crate::gguf::GgufFile;
use crate::loader::{TensorStore, TensorView};
use serde_json::json;

/// Block tensors: llama.cpp's stem → transformers' under `blocks.N.` (each `.weight` and
/// `.bias`).
const BLOCK: [(&str, &str); 6] = [
    ("attn_qkv", "attn.qkv"),
    ("attn_out", "attn.proj"),
    ("ffn_up", "mlp.linear_fc1"),
    ("ffn_down", "mlp.linear_fc2"),
    ("ln1", "norm1"),
    ("ln2", "norm2"),
];

/// Reads a Qwen 3.5 (Qwen3-VL layout) mmproj file.
pub(crate) fn translate(g: &GgufFile, text: &TextSide<'_>) -> Result<Translated, LoadError> {
    let path = g.path();
    let v = "model.visual";
    let mut tensors = Vec::new();
    let mut pair = |hf: String, gguf: String| -> Result<(), LoadError> {
        tensors.push((hf, g.require(&gguf)?));
        Ok(())
    };
    let depth = require_u64(g, "clip.vision.block_count")?;
    for i in 0..depth {
        for (from, to) in BLOCK {
            for s in ["weight", "bias"] {
                pair(
                    format!("{v}.blocks.{i}.{to}.{s}"),
                    format!("v.blk.{i}.{from}.{s}"),
                )?;
            }
        }
    }
    for s in ["weight", "bias"] {
        pair(format!("{v}.merger.norm.{s}"), format!("v.post_ln.{s}"))?;
        pair(format!("{v}.merger.linear_fc1.{s}"), format!("mm.0.{s}"))?;
        pair(format!("{v}.merger.linear_fc2.{s}"), format!("mm.2.{s}"))?;
    }
    pair(
        format!("{v}.pos_embed.weight"),
        "v.position_embd.weight".into(),
    )?;
    pair(
        format!("{v}.patch_embed.proj.bias"),
        "v.patch_embd.bias".into(),
    )?;
    // The converter split the Conv3d kernel `[o, c, t, p, p]` at t = 0 and t = 1.
    let t0 = g.require("v.patch_embd.weight")?;
    let t1 = g.require("v.patch_embd.weight.1")?;
    let [o, c, p, q] = t0.shape[..] else {
        return Err(LoadError::tensor(path, &t0.name, "expected 4 dimensions"));
    };
    if t1.shape != t0.shape {
        return Err(LoadError::tensor(
            path,
            &t1.name,
            format!(
                "shape {:?}, expected {:?} (as v.patch_embd.weight)",
                t1.shape, t0.shape
            ),
        ));
    }
    let (a, b) = (t0.to_f32()?, t1.to_f32()?);
    let plane = p * q;
    let mut kernel = Vec::with_capacity(2 * a.len());
    for (sa, sb) in a.chunks_exact(plane).zip(b.chunks_exact(plane)) {
        kernel.extend_from_slice(sa);
        kernel.extend_from_slice(sb);
    }
    let name = format!("{v}.patch_embed.proj.weight");
    tensors.push((
        name.clone(),
        TensorView::from_f32(path, &name, vec![o, c, 2, p, q], &kernel),
    ));

    let positions = g.require("v.position_embd.weight")?.shape[0];
    // Layers marked as deepstack taps (Qwen3-VL): named in the config so that the tower's
    // configuration refuses them.
    let deepstack: Vec<usize> = match g
        .get("clip.vision.is_deepstack_layers")
        .and_then(|v| v.as_array())
    {
        Some(crate::gguf::MetaArray::Bool(flags)) => flags
            .iter()
            .enumerate()
            .filter(|(_, &f)| f)
            .map(|(i, _)| i)
            .collect(),
        _ => Vec::new(),
    };
    let config = json!({
        "model_type": "qwen3_5",
        "image_token_id": text.require(path, "<|image_pad|>")?,
        "video_token_id": text.require(path, "<|video_pad|>")?,
        "vision_start_token_id": text.require(path, "<|vision_start|>")?,
        "vision_end_token_id": text.require(path, "<|vision_end|>")?,
        "vision_config": {
            "depth": depth,
            "hidden_size": require_u64(g, "clip.vision.embedding_length")?,
            "intermediate_size": require_u64(g, "clip.vision.feed_forward_length")?,
            "num_heads": require_u64(g, "clip.vision.attention.head_count")?,
            "hidden_act": "gelu_pytorch_tanh",
            "in_channels": c,
            "patch_size": require_u64(g, "clip.vision.patch_size")?,
            "temporal_patch_size": 2,
            "spatial_merge_size": g.get_u64("clip.vision.spatial_merge_size")?.unwrap_or(2),
            "out_hidden_size": require_u64(g, "clip.vision.projection_dim")?,
            "num_position_embeddings": positions,
            "deepstack_visual_indexes": deepstack,
        },
    });
    Ok(Translated { config, tensors })
}
