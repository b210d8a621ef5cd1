//! Helpers shared by the integration tests of `oxinfer` and `oxinfer-cli` (the CLI's tests
//! include this folder with `#[path]`): fixture paths and readers ([`fixtures`], [`reference`],
//! [`ids`], [`read_npy_f32`]), comparisons ([`max_abs_diff`], [`agreement`]), scratch folders,
//! the reference checks of the tiny checkpoints ([`checks`], multimodal ones [`media`]), the real test models
//! ([`models`]) and a batch generator's step ([`batch`]).
#![allow(dead_code)]

pub mod batch;
pub mod checks;
pub mod embed;
pub mod media;
pub mod models;
pub mod safetensors_raw;

// Not every test binary uses both.
#[allow(unused_imports)]
pub use batch::*;
#[allow(unused_imports)]
pub use checks::*;
#[allow(unused_imports)]
pub use embed::*;
#[allow(unused_imports)]
pub use media::*;
#[allow(unused_imports)]
pub use models::*;

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository's `tests/fixtures` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A JSON file under [`fixtures`], e.g. `fixture_json("gemma3/llamacpp_ref.json")`.
pub fn fixture_json(rel: &str) -> Value {
    let path = fixtures().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fixture folder's `reference.json`.
pub fn reference(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("reference.json")).expect("reference.json");
    serde_json::from_str(&text).expect("json")
}

/// A JSON list of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// A JSON list of lists of token ids (e.g. per-window top-1 ids), concatenated.
pub fn ids_flat(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id lists")
        .iter()
        .flat_map(ids)
        .collect()
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

/// Largest absolute difference between two equally long slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// [`max_abs_diff`] over the largest magnitude of `want` (at least 1): the scale-free distance
/// of diffusion latents from diffusers'.
pub fn scaled_diff(got: &[f32], want: &[f32]) -> f32 {
    max_abs_diff(got, want) / want.iter().fold(1f32, |m, v| m.max(v.abs()))
}

/// A text-to-image request with the prompt, negative prompt and guidance of a diffusers
/// reference `r`, `steps` steps at `width` x `height`, starting from `init_noise`.
pub fn sd_request(
    r: &Value,
    steps: usize,
    (width, height): (usize, usize),
    init_noise: Vec<f32>,
) -> oxinfer::arch::diffusion::GenerateRequest {
    oxinfer::arch::diffusion::GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        negative_prompt: r["negative_prompt"].as_str().unwrap().into(),
        steps,
        guidance_scale: r["guidance_scale"].as_f64().unwrap() as f32,
        width,
        height,
        init_noise: Some(init_noise),
        ..Default::default()
    }
}

/// Share (0..=1) of positions where two equally long id lists agree (top-1 agreement).
pub fn agreement(got: &[u32], want: &[u32]) -> f64 {
    assert_eq!(got.len(), want.len(), "id lists of different lengths");
    got.iter().zip(want).filter(|(a, b)| a == b).count() as f64 / want.len() as f64
}

/// A copy of the folder `src` (files and sub-folders) in a fresh [`scratch_dir`] named `tag`.
pub fn copy_to_scratch(src: &Path, tag: &str) -> PathBuf {
    fn copy_tree(src: &Path, dst: &Path) {
        for entry in std::fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
            let entry = entry.unwrap();
            let to = dst.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                std::fs::create_dir_all(&to).unwrap();
                copy_tree(&entry.path(), &to);
            } else {
                std::fs::copy(entry.path(), &to).unwrap();
            }
        }
    }
    let dir = scratch_dir(tag);
    copy_tree(src, &dir);
    dir
}

/// A fresh, empty folder under the system temp dir, unique to this test process and `tag`.
pub fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxinfer-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}
