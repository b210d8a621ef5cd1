//! Gemma 4's towers from llama.cpp's mmproj file (projector types `gemma4v` and `gemma4a`): the
//! inverse of its converter (`Gemma4VisionAudioModel`): tensor names back to transformers', the
//! patch embedding back to `[hidden, patch·patch·3]`, the audio's `softplus(per_dim_scale)`
//! back to the parameter, the depthwise kernels back to `[channels, 1, kernel]`.
//!
//! What the file does not store comes from the tensors' shapes (head width, key/value heads,
//! position table, convolution channels and kernel, output widths), from the text model
//! (the image / audio / video token ids by their text, the pad id) and from the released
//! checkpoints' values, which llama.cpp's runtime assumes as well (vision RoPE θ 100, pooling
//! 3 unless `clip.vision.projector.scale_factor` says otherwise; audio chunks of 12 with 13 of
//! left context, logits capped at 50). The soft tokens of an image attend to each other both
//! ways when the text model is not 1,536 or 2,560 wide (E2B and E4B are causal), the rule
//! llama.cpp applies where transformers reads `use_bidirectional_attention` from the config.

use crate::arch::mmproj::{require_u64, reshaped, TextSide, Translated};
use crate::error::LoadError;
use crate::gguf::GgufFile;
use crate::loader::{TensorStore, TensorView};
use serde_json::{json, Value};

/// Text hidden sizes of the Gemma 4 checkpoints whose images stay causal (E2B, E4B).
const CAUSAL_IMAGE_WIDTHS: [usize; 2] = [1536, 2560];

/// Suffixes of a clippable linear's tensors: the weight and its four clamps.
const CLIP_SUFFIXES: [(&str, &str); 5] = [
    ("weight", "linear.weight"),
    ("input_min", "input_min"),
    ("input_max", "input_max"),
    ("output_min", "output_min"),
    ("output_max", "output_max"),
];

/// Vision layer tensors: llama.cpp's stem → transformers' stem under `encoder.layers.N.`, and
/// whether it is a clippable linear (`.linear.weight` plus clamps) or a plain `.weight`.
const VISION_LAYER: [(&str, &str, bool); 13] = [
    ("attn_q", "self_attn.q_proj", true),
    ("attn_k", "self_attn.k_proj", true),
    ("attn_v", "self_attn.v_proj", true),
    ("attn_out", "self_attn.o_proj", true),
    ("attn_q_norm", "self_attn.q_norm", false),
    ("attn_k_norm", "self_attn.k_norm", false),
    ("ffn_gate", "mlp.gate_proj", true),
    ("ffn_up", "mlp.up_proj", true),
    ("ffn_down", "mlp.down_proj", true),
    ("ln1", "input_layernorm", false),
    ("attn_post_norm", "post_attention_layernorm", false),
    ("ln2", "pre_feedforward_layernorm", false),
    ("ffn_post_norm", "post_feedforward_layernorm", false),
];

/// Audio layer tensors, as [`VISION_LAYER`] under `layers.N.` (the depthwise kernel and
/// `per_dim_scale` are transformed, see [`translate`]).
const AUDIO_LAYER: [(&str, &str, bool); 18] = [
    ("ffn_up", "feed_forward1.ffw_layer_1", true),
    ("ffn_down", "feed_forward1.ffw_layer_2", true),
    ("ffn_norm", "feed_forward1.pre_layer_norm", false),
    ("ffn_post_norm", "feed_forward1.post_layer_norm", false),
    ("ffn_up_1", "feed_forward2.ffw_layer_1", true),
    ("ffn_down_1", "feed_forward2.ffw_layer_2", true),
    ("ffn_norm_1", "feed_forward2.pre_layer_norm", false),
    ("ffn_post_norm_1", "feed_forward2.post_layer_norm", false),
    ("attn_q", "self_attn.q_proj", true),
    ("attn_k", "self_attn.k_proj", true),
    ("attn_v", "self_attn.v_proj", true),
    ("attn_out", "self_attn.post", true),
    ("attn_k_rel", "self_attn.relative_k_proj", false),
    ("attn_pre_norm", "norm_pre_attn", false),
    ("attn_post_norm", "norm_post_attn", false),
    ("ln2", "norm_out", false),
    ("conv_pw1", "lconv1d.linear_start", true),
    ("conv_pw2", "lconv1d.linear_end", true),
];

/// Audio layer norms of the light convolution (plain `.weight`).
const AUDIO_CONV_NORMS: [(&str, &str); 2] = [
    ("norm_conv", "lconv1d.conv_norm"),
    ("conv_norm", "lconv1d.pre_layer_norm"),
];

/// Adds the tensors of one layer stem (`gguf` → `hf`) that the file holds.
fn add_stem(
    g: &GgufFile,
    out: &mut Vec<(String, TensorView)>,
    gguf: &str,
    hf: &str,
    clippable: bool,
) -> Result<(), LoadError> {
    if clippable {
        for (from, to) in CLIP_SUFFIXES {
            if let Some(t) = g.tensor(&format!("{gguf}.{from}")) {
                out.push((format!("{hf}.{to}"), t));
            }
        }
    } else {
        out.push((
            format!("{hf}.weight"),
            g.require(&format!("{gguf}.weight"))?,
        ));
    }
    Ok(())
}

/// Reads a Gemma 4 mmproj file (`vision` / `audio`: which towers it holds).
pub(crate) fn translate(
    g: &GgufFile,
    text: &TextSide<'_>,
    vision: bool,
    audio: bool,
) -> Result<Translated, LoadError> {
    let path = g.path();
    let mut tensors = Vec::new();
    let mut config = json!({
        "model_type": "gemma4",
        "image_token_id": text.require(path, "<|image|>")?,
        "boi_token_id": text.require(path, "<|image>")?,
        "eoi_token_id": text.require(path, "<image|>")?,
        "audio_token_id": text.require(path, "<|audio|>")?,
        "boa_token_id": text.require(path, "<|audio>")?,
        "eoa_token_index": text.require(path, "<audio|>")?,
        "video_token_id": text.require(path, "<|video|>")?,
        "text_config": {"pad_token_id": text.pad_id.unwrap_or(0)},
    });
    if vision {
        config["vision_config"] = vision_config(g)?;
        if !CAUSAL_IMAGE_WIDTHS.contains(&text.hidden) {
            config["text_config"]["use_bidirectional_attention"] = json!("vision");
        }
        vision_tensors(g, &mut tensors)?;
    }
    if audio {
        config["audio_config"] = audio_config(g)?;
        // Used when no processor file beside the mmproj file gives the extractor's settings.
        if let Some(mels) = g.get_u64("clip.audio.num_mel_bins")? {
            config["feature_extractor"] = json!({ "feature_size": mels });
        }
        audio_tensors(g, &mut tensors)?;
    }
    Ok(Translated { config, tensors })
}

fn vision_config(g: &GgufFile) -> Result<Value, LoadError> {
    let path = g.path();
    let hidden = require_u64(g, "clip.vision.embedding_length")?;
    let heads = require_u64(g, "clip.vision.attention.head_count")?;
    let head_dim = *g
        .require("v.blk.0.attn_q_norm.weight")?
        .shape
        .last()
        .unwrap_or(&0);
    let kv_rows = g.require("v.blk.0.attn_k.weight")?.shape[0];
    let positions = g.require("v.position_embd.weight")?.shape;
    if head_dim == 0 || !kv_rows.is_multiple_of(head_dim) || positions.len() != 3 {
        return Err(LoadError::field(
            path,
            format!(
                "vision tower: head width {head_dim}, key rows {kv_rows}, position table \
                 {positions:?} (expected [2, positions, hidden])"
            ),
        ));
    }
    let eps = g
        .get_f64("clip.vision.attention.layer_norm_epsilon")?
        .unwrap_or(1e-6);
    Ok(json!({
        "hidden_size": hidden,
        "intermediate_size": require_u64(g, "clip.vision.feed_forward_length")?,
        "num_hidden_layers": require_u64(g, "clip.vision.block_count")?,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_rows / head_dim,
        "head_dim": head_dim,
        "rms_norm_eps": eps,
        "patch_size": require_u64(g, "clip.vision.patch_size")?,
        "pooling_kernel_size": g.get_u64("clip.vision.projector.scale_factor")?.unwrap_or(3),
        "position_embedding_size": positions[1],
        "rope_parameters": {"rope_theta": 100.0, "rope_type": "axial"},
        "standardize": g.tensor("v.std_bias").is_some(),
        "hidden_activation": "gelu_pytorch_tanh",
    }))
}

fn vision_tensors(g: &GgufFile, out: &mut Vec<(String, TensorView)>) -> Result<(), LoadError> {
    let path = g.path();
    let tower = "model.vision_tower";
    // The converter made `[hidden, patch·patch·3]` (y, x, channel) into `[hidden, 3, p, p]`.
    let patch = g.require("v.patch_embd.weight")?;
    let [n, c, p, q] = patch.shape[..] else {
        return Err(LoadError::tensor(
            path,
            &patch.name,
            "expected 4 dimensions",
        ));
    };
    let src = patch.to_f32()?;
    let mut dst = vec![0f32; src.len()];
    for o in 0..n {
        for ch in 0..c {
            for y in 0..p {
                for x in 0..q {
                    dst[((o * p + y) * q + x) * c + ch] = src[((o * c + ch) * p + y) * q + x];
                }
            }
        }
    }
    let name = format!("{tower}.patch_embedder.input_proj.weight");
    out.push((
        name.clone(),
        TensorView::from_f32(path, &name, vec![n, p * q * c], &dst),
    ));
    out.push((
        format!("{tower}.patch_embedder.position_embedding_table"),
        g.require("v.position_embd.weight")?,
    ));
    for s in ["std_bias", "std_scale"] {
        if let Some(t) = g.tensor(&format!("v.{s}")) {
            out.push((format!("{tower}.{s}"), t));
        }
    }
    let layers = require_u64(g, "clip.vision.block_count")?;
    for i in 0..layers {
        let hf = format!("{tower}.encoder.layers.{i}");
        for (from, to, clippable) in VISION_LAYER {
            add_stem(
                g,
                out,
                &format!("v.blk.{i}.{from}"),
                &format!("{hf}.{to}"),
                clippable,
            )?;
        }
    }
    out.push((
        "model.embed_vision.embedding_projection.weight".into(),
        g.require("mm.input_projection.weight")?,
    ));
    Ok(())
}

fn audio_config(g: &GgufFile) -> Result<Value, LoadError> {
    let path = g.path();
    let mut channels = Vec::new();
    while let Some(t) = g.tensor(&format!("a.conv1d.{}.weight", channels.len())) {
        channels.push(t.shape[0]);
    }
    let kernel = *g
        .require("a.blk.0.conv_dw.weight")?
        .shape
        .last()
        .unwrap_or(&0);
    let out_dims = g.require("a.pre_encode.out.weight")?.shape[0];
    if channels.is_empty() || kernel == 0 {
        return Err(LoadError::field(
            path,
            "audio tower: no subsampling convolutions (a.conv1d.N) or depthwise kernel",
        ));
    }
    Ok(json!({
        "hidden_size": require_u64(g, "clip.audio.embedding_length")?,
        "num_attention_heads": require_u64(g, "clip.audio.attention.head_count")?,
        "num_hidden_layers": require_u64(g, "clip.audio.block_count")?,
        "subsampling_conv_channels": channels,
        "conv_kernel_size": kernel,
        "output_proj_dims": out_dims,
        "hidden_act": "silu",
        // llama.cpp reads 1e-6 whatever the file says (an early converter wrote another value).
        "rms_norm_eps": 1e-6,
    }))
}

fn audio_tensors(g: &GgufFile, out: &mut Vec<(String, TensorView)>) -> Result<(), LoadError> {
    let path = g.path();
    let tower = "model.audio_tower";
    let sub = format!("{tower}.subsample_conv_projection");
    let mut i = 0;
    while let Some(t) = g.tensor(&format!("a.conv1d.{i}.weight")) {
        out.push((format!("{sub}.layer{i}.conv.weight"), t));
        out.push((
            format!("{sub}.layer{i}.norm.weight"),
            g.require(&format!("a.conv1d.{i}.norm.weight"))?,
        ));
        i += 1;
    }
    out.push((
        format!("{sub}.input_proj_linear.weight"),
        g.require("a.input_projection.weight")?,
    ));
    for s in ["weight", "bias"] {
        out.push((
            format!("{tower}.output_proj.{s}"),
            g.require(&format!("a.pre_encode.out.{s}"))?,
        ));
    }
    let layers = require_u64(g, "clip.audio.block_count")?;
    for l in 0..layers {
        let hf = format!("{tower}.layers.{l}");
        let gg = format!("a.blk.{l}");
        for (from, to, clippable) in AUDIO_LAYER {
            add_stem(
                g,
                out,
                &format!("{gg}.{from}"),
                &format!("{hf}.{to}"),
                clippable,
            )?;
        }
        for (from, to) in AUDIO_CONV_NORMS {
            add_stem(
                g,
                out,
                &format!("{gg}.{from}"),
                &format!("{hf}.{to}"),
                false,
            )?;
        }
        let dw = g.require(&format!("{gg}.conv_dw.weight"))?;
        let [ch, k] = dw.shape[..] else {
            return Err(LoadError::tensor(path, &dw.name, "expected 2 dimensions"));
        };
        out.push((
            format!("{hf}.lconv1d.depthwise_conv1d.weight"),
            reshaped(&dw, vec![ch, 1, k])?,
        ));
        // The file holds softplus(per_dim_scale); the tower applies softplus to the parameter.
        // Inverted in f64: softplus of the result gives the stored value back within an ulp.
        let scale = g.require(&format!("{gg}.per_dim_scale.weight"))?;
        let inv: Vec<f32> = scale
            .to_f32()?
            .iter()
            .map(|&y| {
                let y = y as f64;
                (if y > 20.0 { y } else { y.exp_m1().ln() }) as f32
            })
            .collect();
        let name = format!("{hf}.self_attn.per_dim_scale");
        out.push((
            name.clone(),
            TensorView::from_f32(path, &name, vec![inv.len()], &inv),
        ));
    }
    out.push((
        "model.embed_audio.embedding_projection.weight".into(),
        g.require("mm.a.input_projection.weight")?,
    ));
    Ok(())
}
