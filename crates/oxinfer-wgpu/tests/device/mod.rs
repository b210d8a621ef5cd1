//! What the wgpu test binaries share: the backend on the first adapter (or a visible skip,
//! a failure under CI), a small deterministic generator, and the relative error measure.
#![allow(dead_code)]

use oxinfer_wgpu::WgpuBackend;
use std::io::Write;

/// Whether the tests run under CI (`$CI` set to anything but empty, `0` or `false`): there
/// lavapipe is installed, so a missing adapter is a failure.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "FALSE"))
}

/// The backend on adapter 0 taking every single op (min_tokens 1), or `None` after a
/// `skipped:` line on stderr (past the harness's capture); under CI, a panic instead.
pub fn backend() -> Option<WgpuBackend> {
    let b = oxinfer_wgpu::probe()
        .and_then(|list| list.first().map(|_| ()).ok_or("no adapter".to_string()))
        .and_then(|()| WgpuBackend::with_min_tokens(0, 1));
    match b {
        Ok(b) => {
            println!("adapter: {}", b.adapter());
            Some(b)
        }
        Err(e) => {
            assert!(
                !in_ci(),
                "no wgpu adapter under CI (lavapipe must be installed): {e}"
            );
            let _ = writeln!(std::io::stderr(), "skipped: no wgpu adapter ({e})");
            None
        }
    }
}

/// `n` values in `[-scale, scale)` from seed `seed` (the kernels' synthetic f32 weights).
pub fn randoms(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let f = oxinfer_kernels::WeightFormat::F32;
    let bytes = oxinfer_kernels::synthetic::random_matrix(f, 1, n, seed).expect("f32 values");
    bytes
        .chunks_exact(4)
        .map(|b| 2.0 * scale * f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// max |a − b| / max |b| (infinite when `a` has a non-finite value).
pub fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths");
    let (mut md, mut mr) = (0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        if !x.is_finite() {
            return f64::INFINITY;
        }
        md = md.max((x as f64 - y as f64).abs());
        mr = mr.max((y as f64).abs());
    }
    md / mr.max(1e-30)
}
