//! Video input of the tiny Qwen 3.5 vision checkpoint against transformers 5.24 float32
//! (references made by tools/ref/make_tiny_qwen35_video.py from two Pillow-made animated
//! GIFs): the video processor's sampled frames and pixel values (torchvision's resize), the
//! video soft tokens, the chat template with videos, the processor's expansion (per frame
//! group `<t seconds><|vision_start|>` + pads + `<|vision_end|>`), the multimodal rotary
//! positions (`get_rope_index` with video grids), the logits of a text + image + video prompt
//! (whole and chunked prefill) and 32 greedy tokens; a folder of the same frames gives the same
//! soft tokens, and so do its frames as an APNG and an animated WebP; bad videos fail naming
//! the input.

mod common;

use common::{
    check_mixed_prompt, check_mrope_positions, encode_error, encode_files, fixtures, ids,
    max_abs_diff, read_npy_f32,
};
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::arch::qwen_vision::config::VisionConfig;
use oxinfer::arch::qwen_vision::video_processor::VideoProcessor;
use oxinfer::engine::media::{encode_video_clip, expand_markers, fill_runs, EncodedMedia};
use oxinfer::error::LoadError;
use oxinfer::media::{decode_video, read_frame_dir, Limits};
use oxinfer::{ChatMessage, Model};
use serde_json::{json, Value};
use std::path::PathBuf;

/// The videos in prompt order.
const VIDEOS: [&str; 2] = ["clip", "short"];

fn dir() -> PathBuf {
    fixtures().join("qwen35-vl-tiny")
}

fn json_file(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir().join(name)).unwrap()).unwrap()
}

fn reference() -> Value {
    json_file("reference_video.json")
}

fn gif(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(format!("{name}.gif"))).unwrap()
}

/// The image then the two videos, encoded.
fn inputs(model: &Model) -> Vec<EncodedMedia> {
    let mut v = encode_files(model, MediaKind::Image, &[("wide", dir().join("wide.png"))]);
    let files: Vec<_> = VIDEOS
        .iter()
        .map(|n| (*n, dir().join(format!("{n}.gif"))))
        .collect();
    v.extend(encode_files(model, MediaKind::Video, &files));
    v
}

/// The user turn of the reference prompt: text, image, video, text, video, question.
fn message(r: &Value) -> ChatMessage {
    let mut msg = ChatMessage::new("user", "");
    msg.parts = Some(vec![
        json!({"type": "text", "text": "Look:"}),
        json!({"type": "image"}),
        json!({"type": "video"}),
        json!({"type": "text", "text": "and"}),
        json!({"type": "video"}),
        json!({"type": "text", "text": r["question"].as_str().unwrap()}),
    ]);
    msg
}

#[test]
fn video_frames_and_pixel_values_match_the_processor() {
    let path = dir().join("config.json");
    let field = |what| LoadError::Field {
        path: path.clone(),
        what,
    };
    let tower =
        VisionConfig::from_json(&json_file("config.json")["vision_config"], &field).unwrap();
    let proc =
        VideoProcessor::from_json(Some(&json_file("video_preprocessor_config.json")), &tower)
            .unwrap();
    let r = reference();
    for name in VIDEOS {
        let want_ref = &r["videos"][name];
        let clip = decode_video(&gif(name), name, &Limits::default()).unwrap();
        assert_eq!(
            clip.frames.len() as u64,
            want_ref["frames"].as_u64().unwrap()
        );
        assert_eq!(clip.fps, want_ref["fps"].as_f64(), "{name}: frame rate");
        let v = proc.preprocess(&clip).unwrap();
        let idx: Vec<u32> = v.indices.iter().map(|&i| i as u32).collect();
        assert_eq!(
            idx,
            ids(&want_ref["sampled_indices"]),
            "{name}: sampled frames"
        );
        let thw = ids(&want_ref["grid_thw"]);
        let g = &v.groups[0];
        assert_eq!(
            [v.groups.len() as u32, g.rows as u32, g.cols as u32],
            [thw[0], thw[1], thw[2]],
            "{name}: grid"
        );
        let values: Vec<f32> = v.groups.iter().flat_map(|g| g.values.clone()).collect();
        let (_, want) = read_npy_f32(&dir().join(format!("pixels_video_{name}.npy")));
        assert_eq!(values.len(), want.len(), "{name}");
        let d = max_abs_diff(&values, &want);
        println!(
            "{name}: {} frame groups, pixel values max diff {d:e}",
            v.groups.len()
        );
        assert!(d <= 1e-5, "{name}: pixel values differ by {d}");
    }
}

#[test]
fn video_soft_tokens_match_and_a_frame_folder_gives_the_same() {
    let model = Model::load(dir()).unwrap();
    let encoded = inputs(&model);
    for (name, m) in VIDEOS.iter().zip(&encoded[1..]) {
        let (shape, want) = read_npy_f32(&dir().join(format!("vision_video_{name}.npy")));
        assert_eq!(m.rows.len(), want.len(), "{name}: {shape:?}");
        let d = max_abs_diff(&m.rows, &want);
        println!("{name}: soft tokens {shape:?}, max diff {d:e}");
        assert!(d <= 1e-4, "{name}: soft tokens differ by {d}");
    }
    // The clip's frames as PNG files in a folder, at the GIF's rate: the same video.
    let clip = decode_video(&gif("clip"), "clip", &Limits::default()).unwrap();
    let folder = common::scratch_dir("qwen35-video-frames");
    for (i, f) in clip.frames.iter().enumerate() {
        image::RgbImage::from_raw(f.width, f.height, f.pixels.clone())
            .unwrap()
            .save(folder.join(format!("frame{i:03}.png")))
            .unwrap();
    }
    let (frames, identity) = read_frame_dir(&folder, clip.fps, &Limits::default()).unwrap();
    assert_eq!(frames, clip);
    let towers = model.lm().media().unwrap();
    let m = encode_video_clip(towers, &frames, &identity, "frames", None).unwrap();
    let (_, want) = read_npy_f32(&dir().join("vision_video_clip.npy"));
    let d = max_abs_diff(&m.rows, &want);
    println!("clip as a frame folder: soft tokens max diff {d:e}");
    assert!(d <= 1e-4, "frame folder: soft tokens differ by {d}");
    // Frames of two sizes are refused by name.
    image::RgbImage::new(8, 8)
        .save(folder.join("frame999.png"))
        .unwrap();
    let e = read_frame_dir(&folder, None, &Limits::default()).unwrap_err();
    assert!(e.to_string().contains("frames differ in size"), "{e}");
    let _ = std::fs::remove_dir_all(&folder);
}

#[test]
fn apng_and_animated_webp_decode_as_the_gif() {
    // clip.png / clip.webp hold clip.gif's frames as Pillow decodes them (lossless), 250 ms each.
    // The APNG decodes to the same bytes. The WebP's later frames come out one level low in
    // many pixels: image-webp 0.2.4 blends fully opaque pixels of a blended frame through its
    // alpha formula (255 · 2^24 / 255 ≈ 1 − 2^-24, floored), where libwebp (Pillow) copies them
    // (`BlendPixelRowNonPremult`); the test holds that difference to at most one level.
    let lim = Limits::default();
    let want = decode_video(&gif("clip"), "clip.gif", &lim).unwrap();
    for (f, tol) in [("clip.png", 0), ("clip.webp", 1)] {
        let got = decode_video(&std::fs::read(dir().join(f)).unwrap(), f, &lim).unwrap();
        assert_eq!(got.frames.len(), want.frames.len(), "{f}");
        for (i, (a, b)) in got.frames.iter().zip(&want.frames).enumerate() {
            assert_eq!((a.width, a.height), (b.width, b.height), "{f}: frame {i}");
            let d = a
                .pixels
                .iter()
                .zip(&b.pixels)
                .map(|(x, y)| x.abs_diff(*y))
                .max();
            assert!(
                d <= Some(tol),
                "{f}: frame {i} differs from the GIF's by {d:?}"
            );
        }
        assert_eq!(got.fps, want.fps, "{f}: frame rate");
    }
}

#[test]
fn chat_template_expansion_and_rotary_positions_match() {
    let model = Model::load(dir()).unwrap();
    let r = reference();
    let msg = message(&r);
    let text = model
        .render_chat(std::slice::from_ref(&msg), true, &Value::Null)
        .unwrap();
    assert_eq!(text, r["chat_template_text"].as_str().unwrap());
    // Rendered, tokenized and expanded as `oxinfer run --image … --video …` does: the ids of
    // transformers' processor (timestamps included).
    let inputs = inputs(&model);
    let towers = model.lm().media().unwrap();
    let dim = model.config().hidden_size;
    let marked = model.chat_tokens(&[msg]).unwrap();
    let (prompt, media) = expand_markers(&marked, towers, &inputs, dim, model.tokenizer()).unwrap();
    assert_eq!(prompt, ids(&r["prompt_ids"]));
    // Every prompt row, read whole and from a later chunk start; a decode step continues at
    // the sequence index plus transformers' rope delta.
    check_mrope_positions(&prompt, &media, &r, 40);
}

#[test]
fn text_image_video_prompt_logits_and_greedy_match() {
    let model = Model::load(dir()).unwrap();
    let inputs = inputs(&model);
    check_mixed_prompt(
        &model,
        &dir(),
        &reference(),
        "logits_video.npy",
        &inputs,
        &[usize::MAX, 50, 7],
        1e-4,
    );
}

#[test]
fn bad_videos_fail_naming_the_input() {
    let model = Model::load(dir()).unwrap();
    let towers = model.lm().media().unwrap();
    let enc = |bytes: &[u8], name: &str| encode_error(&model, MediaKind::Video, bytes, name);
    let png = std::fs::read(dir().join("wide.png")).unwrap();
    let e = enc(&png, "still.png");
    assert!(
        e.starts_with("still.png: a still PNG is not a video"),
        "{e}"
    );
    let g = gif("clip");
    let e = enc(&g[..g.len() / 2], "cut.gif");
    assert!(e.starts_with("cut.gif: cannot decode"), "{e}");
    // One frame: less than the temporal patch (transformers' smart_resize refuses it too).
    let mut one = Vec::new();
    image::codecs::gif::GifEncoder::new(&mut one)
        .encode_frame(image::Frame::new(image::RgbaImage::new(16, 16)))
        .unwrap();
    let e = enc(&one, "one.gif");
    assert!(
        e.starts_with("one.gif: 1 frame(s) sampled: a video needs at least 2"),
        "{e}"
    );
    // A prompt whose video runs do not match the videos given.
    let r = reference();
    let prompt = ids(&r["prompt_ids"]);
    let dim = model.config().hidden_size;
    let all = inputs(&model);
    let e = fill_runs(&prompt, towers, &all[..2], dim).unwrap_err();
    assert!(
        e.to_string()
            .contains("4 video placeholder run(s) for the 2 frame group(s) of 1 video"),
        "{e}"
    );
}
