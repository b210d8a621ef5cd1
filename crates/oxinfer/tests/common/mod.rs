//! Helpers shared by the integration tests: fixture paths, .npy reading, real-model lookup.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The repository's `tests/fixtures` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// Reads a little-endian float32 C-order `.npy` file: (shape, data).
pub fn read_npy_f32(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(&b[..6], b"\x93NUMPY", "{}: not .npy", path.display());
    let (hlen, hstart) = if b[6] == 1 {
        (u16::from_le_bytes([b[8], b[9]]) as usize, 10)
    } else {
        (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12)
    };
    let header = std::str::from_utf8(&b[hstart..hstart + hlen]).expect("header");
    assert!(header.contains("'<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let shape_txt = header
        .split("'shape': (")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .expect("shape");
    let shape: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().expect("dim"))
        .collect();
    let data: Vec<f32> = b[hstart + hlen..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

/// Where real test models live (`OXINFER_TEST_MODELS`, default `~/.cache/oxinfer/models`).
pub fn test_models_dir() -> PathBuf {
    match std::env::var_os("OXINFER_TEST_MODELS") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/oxinfer/models"),
    }
}

/// A real model file, or `None` after printing one "skipped" line.
pub fn real_model(file: &str) -> Option<PathBuf> {
    let p = test_models_dir().join(file);
    if p.is_file() {
        Some(p)
    } else {
        println!(
            "skipped: {} not found (run scripts/fetch-test-models.sh)",
            p.display()
        );
        None
    }
}

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A fixture folder's `reference.json`.
pub fn reference(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("json")
}

/// A JSON list of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Logits of every prompt position, run in pieces of `chunk` tokens.
pub fn prompt_logits(model: &oxinfer::Model, prompt: &[u32], chunk: usize) -> Vec<f32> {
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len() + 64);
    let mut out = Vec::new();
    for piece in prompt.chunks(chunk) {
        out.extend(lm.forward(piece, &mut cache, true).expect("forward"));
    }
    out
}

/// `n` greedy tokens after `prompt` (prefill, then one token per step through the cache).
pub fn greedy(model: &oxinfer::Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let lm = model.lm();
    let mut cache = lm.new_cache(prompt.len() + n + 1);
    let mut logits = lm.forward(prompt, &mut cache, false).expect("prefill");
    let mut out = Vec::new();
    for _ in 0..n {
        let id = oxinfer::engine::sampler::argmax(&logits);
        out.push(id);
        logits = lm.forward(&[id], &mut cache, false).expect("decode");
    }
    out
}

/// Checks one fixture prompt `p` (from `reference.json` in `dir`) on `model`: the prompt logits
/// run in pieces of each size in `chunks` (0 = the whole prompt) within `tol` of the reference,
/// and identical greedy ids. Returns the largest logit difference seen.
pub fn check_prompt(
    model: &oxinfer::Model,
    source: &Path,
    dir: &Path,
    p: &serde_json::Value,
    chunks: &[usize],
    tol: f32,
) -> f32 {
    let prompt = ids(&p["ids"]);
    let (shape, want) = read_npy_f32(&dir.join(p["logits_file"].as_str().expect("file")));
    assert_eq!(shape, vec![prompt.len(), model.config().vocab_size]);
    let mut worst = 0f32;
    for &chunk in chunks {
        let chunk = if chunk == 0 { prompt.len() } else { chunk };
        let d = max_abs_diff(&prompt_logits(model, &prompt, chunk), &want);
        println!(
            "{} prompt {} chunk {chunk}: max abs logit diff {d:.3e}",
            source.display(),
            p["name"]
        );
        assert!(
            d <= tol,
            "{} prompt {} chunk {chunk}: max abs logit diff {d}",
            source.display(),
            p["name"]
        );
        worst = worst.max(d);
    }
    let want_ids = ids(&p["greedy_ids"]);
    let got_ids = greedy(model, &prompt, want_ids.len());
    assert_eq!(
        got_ids,
        want_ids,
        "{} prompt {} greedy",
        source.display(),
        p["name"]
    );
    worst
}

/// Runs the fixture's first two prompts (`dir`'s reference.json) as two sequences of one
/// batched pass (all logits) and returns the largest difference of each from its reference.
pub fn batched_two_prompts_diff(model: &oxinfer::Model, dir: &Path) -> [f32; 2] {
    use oxinfer::arch::SeqBatch;
    let r = reference(dir);
    let prompts = r["prompts"].as_array().expect("prompts");
    let ids_of = |k: usize| ids(&prompts[k]["ids"]);
    let want = |k: usize| {
        let file = prompts[k]["logits_file"].as_str().expect("logits_file");
        read_npy_f32(&dir.join(file)).1
    };
    let (p0, p1) = (ids_of(0), ids_of(1));
    let lm = model.lm();
    let (mut c0, mut c1) = (lm.new_cache(256), lm.new_cache(256));
    let out = {
        let mut batch = [
            SeqBatch {
                tokens: &p0,
                cache: &mut c0,
                all_logits: true,
            },
            SeqBatch {
                tokens: &p1,
                cache: &mut c1,
                all_logits: true,
            },
        ];
        lm.forward_batch(&mut batch).expect("batched forward")
    };
    [
        max_abs_diff(&out[0], &want(0)),
        max_abs_diff(&out[1], &want(1)),
    ]
}

/// Checks every prompt of the fixture in `dir` from each of `sources` (the folder itself or a
/// GGUF twin) with prefill chunks `chunks` ([`check_prompt`]); prints and returns the largest
/// logit difference seen.
pub fn check_sources(dir: &Path, sources: &[PathBuf], chunks: &[usize], tol: f32) -> f32 {
    let r = reference(dir);
    let mut worst_all = 0f32;
    for source in sources {
        let model =
            oxinfer::Model::load(source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        let mut worst = 0f32;
        for p in r["prompts"].as_array().expect("prompts") {
            worst = worst.max(check_prompt(&model, source, dir, p, chunks, tol));
        }
        println!(
            "{}: worst max abs logit diff {worst:e}",
            source.strip_prefix(fixtures()).unwrap_or(source).display()
        );
        worst_all = worst_all.max(worst);
    }
    worst_all
}
