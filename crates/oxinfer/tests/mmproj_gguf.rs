//! llama.cpp's mmproj files read back into transformers' tower tensors: every tensor of the
//! fixtures' vision / audio towers (and their projections into the text model) is present in
//! the translated store with the checkpoint's values, and nothing else is. The files are
//! llama.cpp's converter's (`tools/ref/make_mmproj_fixtures.py`); the end-to-end logits are
//! checked in `crates/oxinfer-cli/tests/media_cli.rs`.

mod common;

use common::{fixtures, max_abs_diff};
use oxinfer::arch::mmproj::{Mmproj, TextSide};
use oxinfer::config::Arch;
use oxinfer::loader::safetensors::SafetensorsModel;
use oxinfer::loader::TensorStore;
use std::collections::HashMap;

/// Prefixes of the tower tensors in the multimodal checkpoints.
const TOWERS: [&str; 5] = [
    "model.vision_tower.",
    "model.audio_tower.",
    "model.embed_vision.",
    "model.embed_audio.",
    "model.visual.",
];

/// The added tokens of a fixture's `tokenizer.json`, by text.
fn added_tokens(dir: &std::path::Path) -> HashMap<String, u32> {
    let text = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    let t: serde_json::Value = serde_json::from_str(&text).unwrap();
    t["added_tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let id = a["id"].as_u64().unwrap() as u32;
            (a["content"].as_str().unwrap().to_string(), id)
        })
        .collect()
}

#[test]
fn mmproj_tensors_are_the_checkpoints() {
    let cases = [
        ("qwen35-vl-tiny", Arch::Qwen35, 64),
        ("tiny_gemma4_mm", Arch::Gemma4, 32),
        ("tiny_gemma4_bidir", Arch::Gemma4, 32),
    ];
    for (name, arch, hidden) in cases {
        let src = fixtures().join(name);
        let tokens = added_tokens(&src);
        let token_id = |t: &str| tokens.get(t).copied();
        let text = TextSide {
            arch,
            token_id: &token_id,
            hidden,
            pad_id: Some(0),
        };
        let mm_path = fixtures()
            .join("mmproj-gguf")
            .join(name)
            .join("mmproj-f32.gguf");
        let mm = Mmproj::open(&mm_path, &text).unwrap();
        let st = SafetensorsModel::open(&src).unwrap();
        let mut checked = 0;
        for (tensor, _) in st.entries() {
            if !TOWERS.iter().any(|p| tensor.starts_with(p)) {
                continue;
            }
            let want = st.get(tensor).unwrap().unwrap();
            let got = mm
                .get(tensor)
                .unwrap_or_else(|| panic!("{name}: {tensor} missing from the mmproj store"))
                .unwrap();
            let (g, w) = (got.to_f32().unwrap(), want.to_f32().unwrap());
            assert_eq!(g.len(), w.len(), "{name}: {tensor}");
            if want.shape.len() > 1 {
                assert_eq!(got.shape, want.shape, "{name}: {tensor}");
            }
            // `per_dim_scale` went through softplus and back; everything else is the bytes.
            let bound = if tensor.ends_with("per_dim_scale") {
                1e-6
            } else {
                0.0
            };
            let d = max_abs_diff(&g, &w);
            assert!(d <= bound, "{name}: {tensor} differs by {d}");
            checked += 1;
        }
        // And no tensor the checkpoint lacks.
        for n in mm.names() {
            assert!(
                st.get(n).is_some(),
                "{name}: the mmproj store has {n}, the checkpoint not"
            );
        }
        assert_eq!(mm.names().count(), checked, "{name}");
        println!("{name}: {checked} tower tensors equal");
    }
}
