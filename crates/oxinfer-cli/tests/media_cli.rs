//! `oxinfer run --image` / `--video` as a process on the tiny multimodal fixtures (Qwen 3.5
//! vision, Gemma 4): the reference prompt ids given with `--tokens` (placeholder runs already
//! expanded) and the images (and, for Qwen 3.5, two animated GIFs) give transformers' logits
//! (`--dump-logits`, within 1e-4) and greedy ids; a chat prompt with an image or a video runs;
//! a bad image or video ends with one error line naming the file.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_fails_with, oxinfer, stderr, stdout};
use common::{fixtures, ids, max_abs_diff, read_npy_f32, scratch_dir};

/// (fixture, images in prompt order).
const FIXTURES: [(&str, [&str; 2]); 2] = [
    ("qwen35-vl-tiny", ["wide.png", "logo.png"]),
    ("tiny_gemma4_mm", ["scene.png", "logo.png"]),
];

#[test]
fn tokens_with_images_match_transformers() {
    let tmp = scratch_dir("media-cli");
    for (name, images) in FIXTURES {
        let dir = fixtures().join(name);
        let r = common::reference(&dir);
        let join = |v: &serde_json::Value| ids(v).iter().map(|i| i.to_string()).collect::<Vec<_>>();
        let (prompt, want) = (join(&r["prompt_ids"]), join(&r["greedy_ids"]));
        let out = tmp.join(format!("{name}.npy"));
        let (a, b) = (dir.join(images[0]), dir.join(images[1]));
        let o = oxinfer(&[
            "run",
            "-m",
            dir.to_str().unwrap(),
            "--tokens",
            &prompt.join(","),
            "--image",
            a.to_str().unwrap(),
            "--image",
            b.to_str().unwrap(),
            "--temp",
            "0",
            "--max-tokens",
            &want.len().to_string(),
            "--show-tokens",
            "--dump-logits",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{name}: {}", stderr(&o));
        assert_eq!(stdout(&o).trim(), want.join(" "), "{name}");
        let (got_shape, got) = read_npy_f32(&out);
        let (want_shape, want) = read_npy_f32(&dir.join("logits.npy"));
        assert_eq!(got_shape, want_shape, "{name}");
        let d = max_abs_diff(&got, &want);
        println!("{name}: --dump-logits max diff {d:e}");
        assert!(d <= 1e-4, "{name}: logits differ by {d}");
    }
}

#[test]
fn a_chat_prompt_with_an_image_runs_and_bad_images_fail_by_name() {
    let dir = fixtures().join("qwen35-vl-tiny");
    let img = dir.join("logo.png");
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "-p",
        "What is it?",
        "--image",
        img.to_str().unwrap(),
        "--temp",
        "0",
        "--max-tokens",
        "4",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).split_whitespace().count(), 4, "{}", stdout(&o));
    let cut = scratch_dir("media-cli-bad").join("cut.png");
    std::fs::write(&cut, &std::fs::read(&img).unwrap()[..300]).unwrap();
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "-p",
        "Hi",
        "--image",
        cut.to_str().unwrap(),
    ]);
    assert_fails_with(&o, &["cut.png"]);
}

#[test]
fn tokens_with_an_image_and_videos_match_transformers() {
    let dir = fixtures().join("qwen35-vl-tiny");
    let text = std::fs::read_to_string(dir.join("reference_video.json")).unwrap();
    let r: serde_json::Value = serde_json::from_str(&text).unwrap();
    let join = |v: &serde_json::Value| ids(v).iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let (prompt, want) = (join(&r["prompt_ids"]), join(&r["greedy_ids"]));
    let out = scratch_dir("media-cli-video").join("video.npy");
    let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "--tokens",
        &prompt.join(","),
        "--image",
        &path("wide.png"),
        "--video",
        &path("clip.gif"),
        "--video",
        &path("short.gif"),
        "--temp",
        "0",
        "--max-tokens",
        &want.len().to_string(),
        "--show-tokens",
        "--dump-logits",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), want.join(" "));
    let (got_shape, got) = read_npy_f32(&out);
    let (want_shape, want) = read_npy_f32(&dir.join("logits_video.npy"));
    assert_eq!(got_shape, want_shape);
    let d = max_abs_diff(&got, &want);
    println!("qwen35-vl-tiny with videos: --dump-logits max diff {d:e}");
    assert!(d <= 1e-4, "logits differ by {d}");
    // Through the chat template: the video's markers expanded with its timestamps.
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "-p",
        "What happens?",
        "--video",
        &path("clip.gif"),
        "--temp",
        "0",
        "--max-tokens",
        "4",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).split_whitespace().count(), 4, "{}", stdout(&o));
    // A still image is not a video.
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "-p",
        "Hi",
        "--video",
        &path("wide.png"),
    ]);
    assert_fails_with(&o, &["wide.png", "not a video"]);
}
