//! Scalar dequantization against the `gguf` Python package's `gguf.quants.dequantize`, on the
//! fixtures written by `tools/ref/make_dequant_fixtures.py` (real GGUF tensors and random
//! blocks). Every type in the manifest must match bit for bit.

use std::path::PathBuf;

use oxinfer_kernels::{dequantize_row, WeightFormat, WeightMatrix};
use serde_json::Value;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/dequant")
}

fn read(name: &str) -> Vec<u8> {
    let p = fixture_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
}

struct Case {
    format: WeightFormat,
    raw: Vec<u8>,
    expected: Vec<f32>,
    n_blocks: usize,
    segments: String,
}

fn cases() -> (Value, Vec<Case>) {
    let manifest: Value =
        serde_json::from_slice(&read("manifest.json")).expect("manifest.json is JSON");
    let mut out = Vec::new();
    for t in manifest["types"].as_array().expect("types array") {
        let name = t["name"].as_str().unwrap();
        let format = WeightFormat::from_name(name).unwrap_or_else(|| panic!("unknown type {name}"));
        assert_eq!(
            t["ggml_type"].as_u64(),
            format.ggml_type().map(u64::from),
            "{name} id"
        );
        assert_eq!(
            t["block_size"].as_u64(),
            Some(format.block_size() as u64),
            "{name} block"
        );
        assert_eq!(
            t["block_bytes"].as_u64(),
            Some(format.block_bytes() as u64),
            "{name} bytes"
        );
        let n_blocks = t["n_blocks"].as_u64().unwrap() as usize;
        let raw = read(t["raw"].as_str().unwrap());
        let expected: Vec<f32> = read(t["dequant"].as_str().unwrap())
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(
            raw.len(),
            n_blocks * format.block_bytes(),
            "{name} raw size"
        );
        assert_eq!(
            expected.len(),
            n_blocks * format.block_size(),
            "{name} f32 size"
        );
        out.push(Case {
            format,
            raw,
            expected,
            n_blocks,
            segments: t["segments"].to_string(),
        });
    }
    (manifest, out)
}

/// Index of the first value that differs in bits (exact equality, -0.0 ≠ +0.0).
fn first_mismatch(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
}

#[test]
fn every_manifest_type_matches_reference_exactly() {
    let (manifest, cases) = cases();
    eprintln!(
        "fixtures from gguf {} / numpy {}",
        manifest["gguf_version"], manifest["numpy_version"]
    );
    // The manifest covers every format the crate knows.
    for f in WeightFormat::ALL {
        assert!(cases.iter().any(|c| c.format == f), "no fixture for {f}");
    }
    for c in &cases {
        let mut got = vec![f32::NAN; c.expected.len()];
        dequantize_row(c.format, &c.raw, &mut got).unwrap();
        if let Some(i) = first_mismatch(&got, &c.expected) {
            let bs = c.format.block_size();
            panic!(
                "{}: value {i} (block {}, index {} in block) = {:e}, reference {:e}; segments {}",
                c.format,
                i / bs,
                i % bs,
                got[i],
                c.expected[i],
                c.segments
            );
        }
        eprintln!("{:5} {:3} blocks: exact", c.format.name(), c.n_blocks);
    }
}

#[test]
fn block_by_block_and_as_matrix_rows_match_too() {
    let (_, cases) = cases();
    for c in &cases {
        let (bs, bb) = (c.format.block_size(), c.format.block_bytes());
        // one block at a time
        for b in 0..c.n_blocks {
            let mut got = vec![0.0f32; bs];
            dequantize_row(c.format, &c.raw[b * bb..(b + 1) * bb], &mut got).unwrap();
            assert_eq!(
                first_mismatch(&got, &c.expected[b * bs..(b + 1) * bs]),
                None,
                "{} block {b}",
                c.format
            );
        }
        // the blocks seen as a matrix of rows of 2 blocks
        let rows = c.n_blocks / 2;
        let cols = 2 * bs;
        let w = WeightMatrix::new(c.format, &c.raw[..rows * 2 * bb], rows, cols).unwrap();
        let mut got = vec![0.0f32; cols];
        for r in 0..rows {
            w.dequantize_row_into(r, &mut got);
            assert_eq!(
                first_mismatch(&got, &c.expected[r * cols..(r + 1) * cols]),
                None,
                "{} row {r}",
                c.format
            );
        }
    }
}
