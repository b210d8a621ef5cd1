//! `oxinfer run --image` / `--video` as a process on the tiny multimodal fixtures (Qwen 3.5
//! vision, Gemma 4, and Gemma 4 whose images attend to themselves both ways): the reference
//! prompt ids given with `--tokens` (placeholder runs already expanded) and the images (and, for
//! Qwen 3.5, two animated GIFs) give transformers' logits (`--dump-logits`, within 1e-4) and
//! greedy ids; a chat prompt with an image or a video runs; a bad image or video ends with one
//! error line naming the file.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_fails_with, oxinfer, stderr, stdout};
use common::{fixtures, ids, max_abs_diff, read_npy_f32, scratch_dir};

/// (fixture, images in prompt order).
const FIXTURES: [(&str, [&str; 2]); 3] = [
    ("qwen35-vl-tiny", ["wide.png", "logo.png"]),
    ("tiny_gemma4_mm", ["scene.png", "logo.png"]),
    // use_bidirectional_attention: vision (images attend to themselves both ways).
    ("tiny_gemma4_bidir", ["scene.png", "logo.png"]),
];

/// `oxinfer run -m dir --tokens r["prompt_ids"] MEDIA… --temp 0 --show-tokens --dump-logits
/// out` (each `(flag, file)` of `media` in order): prints `r["greedy_ids"]`, and the dumped
/// prompt logits match `dir/logits` within 1e-4.
fn check_tokens_run(
    dir: &std::path::Path,
    r: &serde_json::Value,
    media: &[(&str, std::path::PathBuf)],
    logits: &str,
    out: &std::path::Path,
    label: &str,
) {
    let join = |v: &serde_json::Value| ids(v).iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let (prompt, want) = (join(&r["prompt_ids"]), join(&r["greedy_ids"]));
    let (prompt, n) = (prompt.join(","), want.len().to_string());
    let mut args = vec!["run", "-m", dir.to_str().unwrap(), "--tokens", &prompt];
    for (flag, file) in media {
        args.extend([*flag, file.to_str().unwrap()]);
    }
    args.extend([
        "--temp",
        "0",
        "--max-tokens",
        &n,
        "--show-tokens",
        "--dump-logits",
    ]);
    args.push(out.to_str().unwrap());
    let o = oxinfer(&args);
    assert!(o.status.success(), "{label}: {}", stderr(&o));
    assert_eq!(stdout(&o).trim(), want.join(" "), "{label}");
    let (got_shape, got) = read_npy_f32(out);
    let (want_shape, want) = read_npy_f32(&dir.join(logits));
    assert_eq!(got_shape, want_shape, "{label}");
    let d = max_abs_diff(&got, &want);
    println!("{label}: --dump-logits max diff {d:e}");
    assert!(d <= 1e-4, "{label}: logits differ by {d}");
}

/// `oxinfer run -m dir -p PROMPT FLAG FILE --temp 0 --max-tokens 4 --show-tokens` (the chat
/// template with the media's markers) succeeds and prints four ids.
fn check_chat_run(dir: &std::path::Path, prompt: &str, flag: &str, file: &std::path::Path) {
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "-p",
        prompt,
        flag,
        file.to_str().unwrap(),
        "--temp",
        "0",
        "--max-tokens",
        "4",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).split_whitespace().count(), 4, "{}", stdout(&o));
}

#[test]
fn tokens_with_images_match_transformers() {
    let tmp = scratch_dir("media-cli");
    for (name, images) in FIXTURES {
        let dir = fixtures().join(name);
        let r = common::reference(&dir);
        let media = [
            ("--image", dir.join(images[0])),
            ("--image", dir.join(images[1])),
        ];
        let out = tmp.join(format!("{name}.npy"));
        check_tokens_run(&dir, &r, &media, "logits.npy", &out, name);
    }
}

#[test]
fn a_chat_prompt_with_an_image_runs_and_bad_images_fail_by_name() {
    let dir = fixtures().join("qwen35-vl-tiny");
    let img = dir.join("logo.png");
    check_chat_run(&dir, "What is it?", "--image", &img);
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
    let out = scratch_dir("media-cli-video").join("video.npy");
    let media = [
        ("--image", dir.join("wide.png")),
        ("--video", dir.join("clip.gif")),
        ("--video", dir.join("short.gif")),
    ];
    check_tokens_run(
        &dir,
        &r,
        &media,
        "logits_video.npy",
        &out,
        "qwen35-vl-tiny with videos",
    );
    let path = |f: &str| dir.join(f).to_str().unwrap().to_string();
    // Through the chat template: the video's markers expanded with its timestamps.
    check_chat_run(&dir, "What happens?", "--video", &dir.join("clip.gif"));
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
