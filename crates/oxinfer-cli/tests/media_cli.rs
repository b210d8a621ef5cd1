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

/// `oxinfer run MODEL… --tokens r["prompt_ids"] MEDIA… --temp 0 --show-tokens --dump-logits
/// out` (`model`: `-m dir`, or `-m file.gguf --mmproj file`, and any further flags; each
/// `(flag, file)` of `media` in order): prints `r["greedy_ids"]`, and the dumped prompt logits
/// match `logits` within 1e-4. Returns the run's stderr.
fn check_tokens_run(
    model: &[&str],
    r: &serde_json::Value,
    media: &[(&str, std::path::PathBuf)],
    logits: &std::path::Path,
    out: &std::path::Path,
    label: &str,
) -> String {
    let join = |v: &serde_json::Value| ids(v).iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let (prompt, want) = (join(&r["prompt_ids"]), join(&r["greedy_ids"]));
    let (prompt, n) = (prompt.join(","), want.len().to_string());
    let mut args = vec!["run"];
    args.extend(model);
    args.extend(["--tokens", &prompt]);
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
    let (want_shape, want) = read_npy_f32(logits);
    assert_eq!(got_shape, want_shape, "{label}");
    let d = max_abs_diff(&got, &want);
    println!("{label}: --dump-logits max diff {d:e}");
    assert!(d <= 1e-4, "{label}: logits differ by {d}");
    stderr(&o)
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
        let model = ["-m", dir.to_str().unwrap()];
        check_tokens_run(&model, &r, &media, &dir.join("logits.npy"), &out, name);
    }
}

/// `--device wgpu` (lavapipe where no GPU is): the Qwen 3.5 and Gemma 4 vision towers' blocks
/// run as one encoder pass on the device per image (`--profile` counts the two `run_encoder`
/// calls), and the image prompt gives transformers' logits (within 1e-4), the `--device cpu`
/// run's (within 1e-4) and the greedy ids. Without a wgpu adapter it prints a `skipped:` line
/// (under `CI=true` it fails).
#[test]
fn images_on_wgpu_match_transformers_and_the_cpu() {
    for (name, images) in &FIXTURES[..2] {
        let dir = fixtures().join(name);
        let d = dir.to_str().unwrap();
        let probe = oxinfer(&[
            "run", "-m", d, "--tokens", "1", "-n", "1", "--device", "wgpu",
        ]);
        if !probe.status.success() && stderr(&probe).contains("--device wgpu:") {
            let why = stderr(&probe);
            common::models::skip(&format!("{name} on wgpu"), why.trim(), true);
            return;
        }
        let r = common::reference(&dir);
        let media = images.map(|f| ("--image", dir.join(f)));
        let tmp = scratch_dir(&format!("media-cli-wgpu-{name}"));
        let mut logits = Vec::new();
        for device in ["cpu", "wgpu"] {
            let out = tmp.join(format!("{device}.npy"));
            let model = ["-m", d, "--device", device, "--profile"];
            let label = format!("{name} --device {device}");
            let err = check_tokens_run(&model, &r, &media, &dir.join("logits.npy"), &out, &label);
            let encoder_calls = err
                .lines()
                .find(|l| l.trim_start().starts_with("run_encoder"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u32>().ok());
            let want = (device == "wgpu").then_some(2);
            assert_eq!(encoder_calls, want, "{label}: device encoder passes\n{err}");
            logits.push(read_npy_f32(&out).1);
        }
        let d = max_abs_diff(&logits[1], &logits[0]);
        println!("{name}: --device wgpu against --device cpu, logits max diff {d:e}");
        assert!(
            d <= 1e-4,
            "{name}: wgpu logits differ from the CPU's by {d}"
        );
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
        &["-m", dir.to_str().unwrap()],
        &r,
        &media,
        &dir.join("logits_video.npy"),
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

/// The GGUF twins of the fixtures (`tests/fixtures/mmproj-gguf/`, written by llama.cpp's
/// converter: `tools/ref/make_mmproj_fixtures.py`): `-m model.gguf --mmproj mmproj-f32.gguf`
/// gives transformers' logits and greedy ids, and a folder holding both finds the mmproj by
/// itself. `tiny_gemma4_mm`'s images are causal in transformers, but an mmproj file does not
/// say so and llama.cpp's rule (images attend both ways unless the text model is 1,536 or
/// 2,560 wide) makes them bidirectional at this width: its audio is checked, the images of
/// `tiny_gemma4_bidir`.
/// (fixture, media flags and files, reference file, logits file).
type MmprojCase = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static str,
    &'static str,
);

#[test]
fn gguf_with_mmproj_matches_transformers() {
    let tmp = scratch_dir("media-cli-mmproj");
    let cases: [MmprojCase; 3] = [
        (
            "qwen35-vl-tiny",
            &[("--image", "wide.png"), ("--image", "logo.png")],
            "reference.json",
            "logits.npy",
        ),
        (
            "tiny_gemma4_bidir",
            &[("--image", "scene.png"), ("--image", "logo.png")],
            "reference.json",
            "logits.npy",
        ),
        (
            "tiny_gemma4_mm",
            &[("--audio", "speech.wav")],
            "reference_audio.json",
            "logits_audio.npy",
        ),
    ];
    for (name, media, reference, logits) in cases {
        let src = fixtures().join(name);
        let gguf = fixtures().join("mmproj-gguf").join(name);
        let text = std::fs::read_to_string(src.join(reference)).unwrap();
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        let media: Vec<_> = media.iter().map(|(f, file)| (*f, src.join(file))).collect();
        let (model, mmproj) = (gguf.join("model.gguf"), gguf.join("mmproj-f32.gguf"));
        let explicit = [
            "-m",
            model.to_str().unwrap(),
            "--mmproj",
            mmproj.to_str().unwrap(),
        ];
        let out = tmp.join(format!("{name}.npy"));
        let label = format!("{name} (GGUF + mmproj)");
        check_tokens_run(&explicit, &r, &media, &src.join(logits), &out, &label);
        let folder = ["-m", gguf.to_str().unwrap()];
        let label = format!("{name} (GGUF folder)");
        check_tokens_run(&folder, &r, &media, &src.join(logits), &out, &label);
    }
}

#[test]
fn mismatched_or_misplaced_mmproj_files_fail_by_name() {
    let g = fixtures().join("mmproj-gguf");
    let path = |p: std::path::PathBuf| p.to_str().unwrap().to_string();
    let qwen_text = path(g.join("qwen35-vl-tiny/model.gguf"));
    let qwen_mm = path(g.join("qwen35-vl-tiny/mmproj-f32.gguf"));
    let gemma_mm = path(g.join("tiny_gemma4_mm/mmproj-f32.gguf"));
    let run = |args: &[&str]| {
        let mut all = vec!["run", "-p", "Hi", "--max-tokens", "1"];
        all.extend(args);
        oxinfer(&all)
    };
    // The towers alone are not a model.
    assert_fails_with(&run(&["-m", &qwen_mm]), &["mmproj-f32.gguf", "--mmproj"]);
    // Towers of another family.
    assert_fails_with(
        &run(&["-m", &qwen_text, "--mmproj", &gemma_mm]),
        &["mmproj-f32.gguf", "gemma4", "qwen35"],
    );
    let llama = path(fixtures().join("llama-tiny-a/model.gguf"));
    assert_fails_with(
        &run(&["-m", &llama, "--mmproj", &qwen_mm]),
        &["mmproj-f32.gguf", "llama"],
    );
    // A text model given as the towers.
    assert_fails_with(
        &run(&["-m", &qwen_text, "--mmproj", &qwen_text]),
        &["model.gguf", "not a multimodal projector"],
    );
    // A safetensors checkpoint has its towers in its folder.
    let st = path(fixtures().join("qwen35-vl-tiny"));
    assert_fails_with(
        &run(&["-m", &st, "--mmproj", &qwen_mm]),
        &["mmproj-f32.gguf", "safetensors"],
    );
    // A truncated mmproj file.
    let cut = scratch_dir("media-cli-mmproj-bad").join("mmproj-cut.gguf");
    std::fs::write(&cut, &std::fs::read(&qwen_mm).unwrap()[..50_000]).unwrap();
    assert_fails_with(
        &run(&["-m", &qwen_text, "--mmproj", cut.to_str().unwrap()]),
        &["mmproj-cut.gguf", "truncated"],
    );
}

#[test]
fn info_names_the_towers_and_their_mmproj_file() {
    let dir = fixtures().join("mmproj-gguf/tiny_gemma4_mm");
    let o = oxinfer(&["info", "-m", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("media inputs:"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        line.contains("image, audio") && line.contains("mmproj-f32.gguf"),
        "{line}"
    );
}

/// An mmproj file found beside a model in a folder, not asked for, that cannot be paired with
/// it (here Qwen 3.5 towers beside a Llama model) leaves a text model and a warning; the same
/// file given with `--mmproj` is an error.
#[test]
fn an_unpairable_mmproj_in_a_folder_warns_and_the_text_model_runs() {
    let dir = scratch_dir("media-cli-mmproj-folder");
    std::fs::copy(
        fixtures().join("llama-tiny-a/model.gguf"),
        dir.join("model.gguf"),
    )
    .unwrap();
    let mm = fixtures().join("mmproj-gguf/qwen35-vl-tiny/mmproj-f32.gguf");
    std::fs::copy(&mm, dir.join("mmproj-f32.gguf")).unwrap();
    let o = oxinfer(&[
        "run",
        "-m",
        dir.to_str().unwrap(),
        "--tokens",
        "1,2,3",
        "--max-tokens",
        "2",
        "--show-tokens",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning:") && stderr(&o).contains("without media towers"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stdout(&o).split_whitespace().count(), 2);
}
