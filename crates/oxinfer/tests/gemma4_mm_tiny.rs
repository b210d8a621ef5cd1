//! The tiny multimodal Gemma 4 checkpoint against transformers 5 float32 (fixture made by
//! tools/ref/make_tiny_gemma4_mm.py): the image processor's pixel values (one image kept at its
//! size, one resized with Pillow's bicubic filter), the vision tower's soft tokens, the logits
//! of a chat prompt with two images (whole and chunked prefill, the chunks cutting through the
//! images' placeholder runs) and 32 greedy tokens through the generation loop.

mod common;

use common::{
    check_mixed_prompt, encode_files, fixtures, ids, max_abs_diff, read_npy_f32, reference,
};
use oxinfer::arch::gemma::image_processor::ImageProcessor;
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::engine::media::{encode_media, fill_runs, EncodedMedia, MediaCache};
use oxinfer::media::{decode_image, Limits};
use oxinfer::Model;
use std::path::PathBuf;
use std::sync::Arc;

fn dir() -> PathBuf {
    fixtures().join("tiny_gemma4_mm")
}

/// The fixture's images in prompt order: (name, file).
fn images() -> Vec<(&'static str, PathBuf)> {
    vec![
        ("scene", dir().join("scene.png")),
        ("logo", dir().join("logo.png")),
    ]
}

fn encoded(model: &Model) -> Vec<EncodedMedia> {
    encode_files(model, MediaKind::Image, &images())
}

#[test]
fn pixel_values_match_the_processor() {
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("preprocessor_config.json")).unwrap())
            .unwrap();
    let proc = ImageProcessor::from_json(Some(&json), 16, 3).unwrap();
    let r = reference(&dir());
    for (name, path) in images() {
        let img = decode_image(&std::fs::read(&path).unwrap(), name, &Limits::default()).unwrap();
        let p = proc.preprocess(&img).unwrap();
        let grid = ids(&r["images"][name]["patch_grid"]);
        assert_eq!([p.rows as u32, p.cols as u32], [grid[0], grid[1]], "{name}");
        let (_, want) = read_npy_f32(&dir().join(format!("pixels_{name}.npy")));
        let d = max_abs_diff(&p.values, &want);
        println!("{name}: pixel values max diff {d:e}");
        assert!(d <= 1e-5, "{name}: pixel values differ by {d}");
    }
}

#[test]
fn vision_soft_tokens_match() {
    let model = Model::load(dir()).unwrap();
    for ((name, _), m) in images().iter().zip(encoded(&model)) {
        let (shape, want) = read_npy_f32(&dir().join(format!("vision_{name}.npy")));
        assert_eq!(m.rows.len(), want.len(), "{name}: {shape:?}");
        let d = max_abs_diff(&m.rows, &want);
        println!("{name}: soft tokens {shape:?}, max diff {d:e}");
        assert!(d <= 1e-4, "{name}: soft tokens differ by {d}");
    }
}

#[test]
fn mixed_prompt_logits_and_greedy_match() {
    let model = Model::load(dir()).unwrap();
    let inputs = encoded(&model);
    let r = reference(&dir());
    check_mixed_prompt(
        &model,
        &dir(),
        &r,
        "logits.npy",
        &inputs,
        &[usize::MAX, 50, 7],
        1e-4,
    );
}

#[test]
fn placeholder_counts_are_checked_and_text_only_runs_unchanged() {
    let model = Model::load(dir()).unwrap();
    let towers = model.lm().media().unwrap();
    let dim = model.config().hidden_size;
    let inputs = encoded(&model);
    let r = reference(&dir());
    let ids_ = ids(&r["prompt_ids"]);
    let e = fill_runs(&ids_, towers, &inputs[..1], dim).unwrap_err();
    assert!(
        e.to_string().contains("2 image placeholder run(s) for 1"),
        "{e}"
    );
    let mut short = ids_.clone();
    short.remove(ids_.iter().position(|&i| i == 260).unwrap());
    let e = fill_runs(&short, towers, &inputs, dim).unwrap_err();
    assert!(
        e.to_string().contains("has 63 ids, the input gives 64"),
        "{e}"
    );
    // The cache returns the same rows for the same bytes.
    let cache = MediaCache::new(1);
    let bytes = std::fs::read(dir().join("scene.png")).unwrap();
    let a = encode_media(
        towers,
        MediaKind::Image,
        &bytes,
        "a",
        &Limits::default(),
        Some(&cache),
    );
    let b = encode_media(
        towers,
        MediaKind::Image,
        &bytes,
        "b",
        &Limits::default(),
        Some(&cache),
    );
    assert!(Arc::ptr_eq(&a.unwrap().rows, &b.unwrap().rows));
    let e = encode_media(
        towers,
        MediaKind::Image,
        &bytes[..100],
        "cut.png",
        &Limits::default(),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("cut.png: "), "{e}");
}
