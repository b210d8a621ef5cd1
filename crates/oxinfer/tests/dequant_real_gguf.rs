//! Dequantization of real GGUF files bit for bit against the `gguf` Python package.
//!
//! `OXINFER_DEQUANT_FILES` lists GGUF files (separated by `:`), each with the
//! `<file>.dequant.json` that `tools/ref/dequant_hashes.py` wrote beside it: the SHA-256 of every
//! tensor as `gguf.quants.dequantize` gives it (little-endian f32, row order). This test
//! dequantizes every tensor with oxinfer (`TensorView::to_f32`) and compares the hashes and the
//! types. `scripts/make-iq-files.sh` makes the files (llama.cpp's quantizer on SmolLM2 and
//! Gemma 3: every IQ / TQ / MXFP4 / BF16 type) and runs this test on them; a few seconds per
//! file. Unset (CI, which does not build llama.cpp): one line says the check was skipped.

use std::path::{Path, PathBuf};

use oxinfer::gguf::GgufFile;
use serde_json::Value;
use sha2::{Digest, Sha256};

const FILES_VAR: &str = "OXINFER_DEQUANT_FILES";

/// The tensors of `file` whose dequantized values differ from the reference's, as lines.
fn mismatches(file: &Path) -> (usize, Vec<String>) {
    let json_path = PathBuf::from(format!("{}.dequant.json", file.display()));
    let text = std::fs::read_to_string(&json_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (make it with tools/ref/dequant_hashes.py {})",
            json_path.display(),
            file.display()
        )
    });
    let reference: Value = serde_json::from_str(&text).expect("reference JSON");
    let want = reference["tensors"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: no 'tensors' object", json_path.display()));
    let g = GgufFile::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut bad = Vec::new();
    let infos = g.tensors();
    if infos.len() != want.len() {
        bad.push(format!(
            "{} tensors in the file, {} in the reference",
            infos.len(),
            want.len()
        ));
    }
    for info in infos {
        let Some(w) = want.get(&info.name) else {
            bad.push(format!("{}: not in the reference", info.name));
            continue;
        };
        let ty = info.format.to_string();
        if w["type"].as_str() != Some(ty.as_str()) {
            bad.push(format!("{}: type {ty}, reference {}", info.name, w["type"]));
            continue;
        }
        let view = g.tensor(&info.name).expect("listed tensor");
        let values = view
            .to_f32()
            .unwrap_or_else(|e| panic!("{}: {}: {e}", file.display(), info.name));
        let mut hasher = Sha256::new();
        for v in &values {
            hasher.update(v.to_le_bytes());
        }
        let got: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if w["sha256"].as_str() != Some(got.as_str())
            || w["n"].as_u64() != Some(values.len() as u64)
        {
            bad.push(format!("{} ({ty}): values differ from gguf's", info.name));
        }
    }
    (infos.len(), bad)
}

#[test]
fn real_files_dequantize_like_the_gguf_package() {
    let Some(list) = std::env::var_os(FILES_VAR) else {
        eprintln!(
            "skipping: {FILES_VAR} is not set (scripts/make-iq-files.sh makes the files and sets it)"
        );
        return;
    };
    let files: Vec<PathBuf> = std::env::split_paths(&list).collect();
    assert!(!files.is_empty(), "{FILES_VAR} names no file");
    let mut failed = Vec::new();
    for file in &files {
        let t0 = std::time::Instant::now();
        let (n, bad) = mismatches(file);
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if bad.is_empty() {
            eprintln!(
                "{name}: {n} tensors identical to gguf's ({:.1} s)",
                t0.elapsed().as_secs_f64()
            );
        } else {
            eprintln!("{name}: {} of {n} tensors differ", bad.len());
            failed.extend(bad.into_iter().map(|b| format!("{name}: {b}")));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// The weight matrices of `file` whose packed product (this CPU's best packed kernels)
/// differs from the row-major scalar kernels' on the same int8 activations by more than
/// float-order rounding, as lines; and how many matrices were compared.
fn packed_mismatches(file: &Path) -> (usize, Vec<String>) {
    use oxinfer_kernels::dispatch::Isa;
    use oxinfer_kernels::packed::{matmul_packed, PackedMatrix};
    use oxinfer_kernels::WeightMatrix;
    let g = GgufFile::open(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let (mut n, mut bad) = (0, Vec::new());
    for info in g.tensors() {
        let view = g.tensor(&info.name).expect("listed tensor");
        let [rows, cols] = view.shape[..] else {
            continue;
        };
        if !PackedMatrix::supports(view.format) {
            continue;
        }
        let w = WeightMatrix::new(view.format, view.bytes(), rows, cols)
            .unwrap_or_else(|e| panic!("{}: {}: {e}", file.display(), info.name));
        let p = PackedMatrix::pack(&w).expect("a packed format");
        let t = 3;
        let x: Vec<f32> = (0..t * cols)
            .map(|i| ((i * 7919 % 2001) as f32 / 1000.0 - 1.0) * (1 + i % 5) as f32)
            .collect();
        let (mut want, mut got) = (vec![0f32; t * rows], vec![0f32; t * rows]);
        oxinfer_kernels::fast::matmul_fast(&w, &x, t, &mut want, Isa::Scalar);
        matmul_packed(&p, &x, t, &mut got);
        let scale = 1.0 + want.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let close = worst <= 2e-5 * scale && got.iter().all(|v| v.is_finite());
        if !close {
            bad.push(format!(
                "{} ({}): packed product off by {worst} (largest value {scale})",
                info.name, view.format
            ));
        }
        n += 1;
    }
    (n, bad)
}

/// The packed kernels (IQ formats decoded to table indices at load) on every real matrix of
/// the same files: same products as the row-major kernels up to float-order rounding.
#[test]
fn real_files_packed_products_match_the_row_kernels() {
    let Some(list) = std::env::var_os(FILES_VAR) else {
        eprintln!("skipping: {FILES_VAR} is not set");
        return;
    };
    let mut failed = Vec::new();
    for file in std::env::split_paths(&list) {
        let (n, bad) = packed_mismatches(&file);
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        eprintln!("{name}: {n} packed matrices, {} differ", bad.len());
        failed.extend(bad.into_iter().map(|b| format!("{name}: {b}")));
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
