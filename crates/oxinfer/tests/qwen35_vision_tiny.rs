//! The tiny Qwen 3.5 vision checkpoints, dense (`qwen3_5`) and MoE (`qwen3_5_moe`), against
//! transformers 5 float32 (fixtures made by tools/ref/make_tiny_qwen35_vl.py): the image processor's pixel values (two images, both
//! smart-resized with Pillow's bicubic filter), the vision tower's soft tokens, the
//! multimodal rotary positions of a two-image prompt (transformers' `get_rope_index`), the chat
//! template rendered with images, the logits of that prompt (whole and chunked prefill, chunks
//! cutting through the images) and 32 greedy tokens; bad images fail naming the input.

mod common;

use common::reference;
use common::{
    check_mixed_prompt, check_mrope_positions, encode_error, encode_files, fixtures, ids,
    max_abs_diff, read_npy_f32,
};
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::arch::qwen_vision::config::VisionConfig;
use oxinfer::arch::qwen_vision::image_processor::ImageProcessor;
use oxinfer::engine::media::{encode_media, expand_markers, fill_runs, EncodedMedia};
use oxinfer::error::LoadError;
use oxinfer::media::{decode_image, Limits};
use oxinfer::{ChatMessage, Model};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The fixtures: dense (`qwen3_5`) first, then MoE (`qwen3_5_moe`).
const VARIANTS: [&str; 2] = ["qwen35-vl-tiny", "qwen35moe-vl-tiny"];

fn dir() -> PathBuf {
    fixtures().join(VARIANTS[0])
}

/// The images of fixture `d` in prompt order: (name, file).
fn images_in(d: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![("wide", d.join("wide.png")), ("logo", d.join("logo.png"))]
}

fn encoded(model: &Model, d: &Path) -> Vec<EncodedMedia> {
    encode_files(model, MediaKind::Image, &images_in(d))
}

fn json_file(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir().join(name)).unwrap()).unwrap()
}

#[test]
fn pixel_values_match_the_processor() {
    let path = dir().join("config.json");
    let field = |what| LoadError::Field {
        path: path.clone(),
        what,
    };
    let tower =
        VisionConfig::from_json(&json_file("config.json")["vision_config"], &field).unwrap();
    let proc =
        ImageProcessor::from_json(Some(&json_file("preprocessor_config.json")), &tower).unwrap();
    let r = reference(&dir());
    for (name, path) in images_in(&dir()) {
        let img = decode_image(&std::fs::read(&path).unwrap(), name, &Limits::default()).unwrap();
        let p = proc.preprocess(&img).unwrap();
        let thw = ids(&r["images"][name]["grid_thw"]);
        assert_eq!(
            [1, p.rows as u32, p.cols as u32],
            [thw[0], thw[1], thw[2]],
            "{name}"
        );
        let (_, want) = read_npy_f32(&dir().join(format!("pixels_{name}.npy")));
        let d = max_abs_diff(&p.values, &want);
        println!("{name}: pixel values max diff {d:e}");
        assert!(d <= 1e-5, "{name}: pixel values differ by {d}");
    }
}

#[test]
fn vision_soft_tokens_match() {
    for v in VARIANTS {
        let dir = fixtures().join(v);
        let model = Model::load(&dir).unwrap();
        for ((name, _), m) in images_in(&dir).iter().zip(encoded(&model, &dir)) {
            let (shape, want) = read_npy_f32(&dir.join(format!("vision_{name}.npy")));
            assert_eq!(m.rows.len(), want.len(), "{v} {name}: {shape:?}");
            let d = max_abs_diff(&m.rows, &want);
            println!("{v} {name}: soft tokens {shape:?}, max diff {d:e}");
            assert!(d <= 1e-4, "{v} {name}: soft tokens differ by {d}");
        }
    }
}

#[test]
fn chat_template_and_rotary_positions_match() {
    let model = Model::load(dir()).unwrap();
    let r = reference(&dir());
    let mut msg = ChatMessage::new("user", "");
    msg.parts = Some(vec![
        json!({"type": "text", "text": "Look:"}),
        json!({"type": "image"}),
        json!({"type": "text", "text": "and"}),
        json!({"type": "image"}),
        json!({"type": "text", "text": "Say?"}),
    ]);
    let text = model
        .render_chat(&[msg.clone()], true, &Value::Null)
        .unwrap();
    assert_eq!(text, r["chat_template_text"].as_str().unwrap());
    // Rendered, tokenized and expanded as `oxinfer run --image` does: the reference ids.
    let inputs = encoded(&model, &dir());
    let towers = model.lm().media().unwrap();
    let dim = model.config().hidden_size;
    let marked = model.chat_tokens(&[msg]).unwrap();
    let (prompt, media) = expand_markers(&marked, towers, &inputs, dim, model.tokenizer()).unwrap();
    assert_eq!(prompt, ids(&r["prompt_ids"]));
    // Every prompt row, read whole and from a later chunk start; a decode step continues at
    // the sequence index plus transformers' rope delta.
    check_mrope_positions(&prompt, &media, &r, 30);
}

#[test]
fn mixed_prompt_logits_and_greedy_match() {
    for v in VARIANTS {
        let dir = fixtures().join(v);
        let model = Model::load(&dir).unwrap();
        let inputs = encoded(&model, &dir);
        let r = reference(&dir);
        println!("{v}:");
        let chunks = [usize::MAX, 50, 7];
        check_mixed_prompt(&model, &dir, &r, "logits.npy", &inputs, &chunks, 1e-4);
    }
}

#[test]
fn bad_images_fail_naming_the_input() {
    let model = Model::load(dir()).unwrap();
    let towers = model.lm().media().unwrap();
    let enc = |bytes: &[u8], name: &str| encode_error(&model, MediaKind::Image, bytes, name);
    let png = std::fs::read(dir().join("logo.png")).unwrap();
    let e = enc(&png[..200], "cut.png");
    assert!(e.starts_with("cut.png: "), "{e}");
    let e = enc(b"BM not an image at all", "x.bmp");
    assert!(e.starts_with("x.bmp: "), "{e}");
    // 1 × 300 pixels: beyond the processor's aspect-ratio limit of 200.
    let mut thin = Vec::new();
    image::RgbImage::new(300, 1)
        .write_to(
            &mut std::io::Cursor::new(&mut thin),
            image::ImageFormat::Png,
        )
        .unwrap();
    let e = enc(&thin, "thin.png");
    assert!(
        e.starts_with("thin.png: ") && e.contains("aspect ratio"),
        "{e}"
    );
    // An input count that does not match the prompt's runs.
    let inputs = encoded(&model, &dir());
    let prompt = ids(&reference(&dir())["prompt_ids"]);
    let dim = model.config().hidden_size;
    let e = fill_runs(&prompt, towers, &inputs[..1], dim).unwrap_err();
    assert!(
        e.to_string().contains("2 image placeholder run(s) for 1"),
        "{e}"
    );
    // Audio is refused by name.
    let e = encode_media(
        towers,
        MediaKind::Audio,
        b"RIFF",
        "a.wav",
        &Limits::default(),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("does not take audio"), "{e}");
}
