//! NomicBERT beyond the plain fixture: nomic's remote-code `config.json` spelling (`n_embd`,
//! `rotary_emb_base`, `n_positions`, `rotary_scaling_factor`, …), which must load the same model
//! as transformers' spelling, and dynamic NTK RoPE scaling past the trained length
//! (tests/fixtures/nomic-bert-dynamic, made by tools/ref/make_tiny_nomic_dynamic.py: trained
//! length 16, factor 2, texts of 2–32 tokens; references from freshly loaded transformers /
//! sentence-transformers models, one text at a time).

mod common;

use std::path::{Path, PathBuf};

use common::{check_embeddings, check_hidden_states, copy_to_scratch, fixtures, load_embedder};
use oxinfer::embed::{EmbedOptions, Embedder};
use serde_json::{json, Value};

fn dynamic_dir() -> PathBuf {
    fixtures().join("nomic-bert-dynamic")
}

/// A copy of the fixture folder `src` in a scratch folder named `tag`, its `config.json`
/// replaced by `config`.
fn copy_with_config(src: &Path, tag: &str, config: &Value) -> PathBuf {
    let dir = copy_to_scratch(src, tag);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

fn config_of(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap()
}

/// `native` (transformers' `NomicBertConfig`) in the spelling of nomic's remote code, as the
/// hub's nomic-embed-text `config.json` has it.
fn remote_spelling(native: &Value) -> Value {
    let rope = &native["rope_parameters"];
    let dynamic = rope["rope_type"] == "dynamic";
    let trained = native["max_position_embeddings"].as_u64().unwrap();
    json!({
        "architectures": ["NomicBertModel"],
        "model_type": "nomic_bert",
        "activation_function": "swiglu",
        "n_embd": native["hidden_size"],
        "n_head": native["num_attention_heads"],
        "n_layer": native["num_hidden_layers"],
        "n_inner": native["intermediate_size"],
        "n_positions": trained * if dynamic { 2 } else { 1 },
        "max_trained_positions": trained,
        "layer_norm_epsilon": native["layer_norm_eps"],
        "rotary_emb_base": rope["rope_theta"],
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": false,
        "rotary_emb_scale_base": null,
        "rotary_scaling_factor": if dynamic { rope["factor"].clone() } else { Value::Null },
        "prenorm": false,
        "causal": false,
        "qkv_proj_bias": false,
        "mlp_fc1_bias": false,
        "mlp_fc2_bias": false,
        "type_vocab_size": native["type_vocab_size"],
        "vocab_size": native["vocab_size"],
        "pad_vocab_size_multiple": 1,
        "use_flash_attn": true,
    })
}

/// The dynamic fixture in nomic's spelling: `n_positions` 32 over a trained length of 16.
fn remote_dynamic(tag: &str, factor: Value) -> PathBuf {
    let mut cfg = remote_spelling(&config_of(&dynamic_dir()));
    cfg["rotary_scaling_factor"] = factor;
    copy_with_config(&dynamic_dir(), tag, &cfg)
}

#[test]
fn dynamic_ntk_matches_transformers_on_both_sides_of_the_trained_length() {
    let dir = remote_dynamic("nomic-remote-ntk", json!(2.0));
    assert_eq!(load_embedder(&dir).max_tokens(), 32);
    check_hidden_states(&dir, 1e-4);
    check_embeddings(&dir, &[], 1e-5);
}

#[test]
fn transformers_spelling_stops_at_the_trained_length_as_sentence_transformers() {
    let e = load_embedder(&dynamic_dir());
    assert_eq!((e.dim(), e.max_tokens()), (32, 16));
    let texts = common::reference_texts(&dynamic_dir());
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let got: Vec<f32> = e.embed(&refs, &EmbedOptions::default()).unwrap().concat();
    let (_, want) = common::read_npy_f32(&dynamic_dir().join("embeddings_trained.npy"));
    let d = common::max_abs_diff(&got, &want);
    println!("embeddings_trained.npy: max abs diff {d:.2e}");
    assert!(d <= 1e-5, "embeddings differ by {d}");
}

#[test]
fn dynamic_ntk_changes_only_the_sequences_past_the_trained_length() {
    let scaled = load_embedder(&remote_dynamic("nomic-ntk-on", json!(2.0)));
    let plain = load_embedder(&remote_dynamic("nomic-ntk-off", Value::Null));
    let texts = common::reference_texts(&dynamic_dir());
    let opts = EmbedOptions::default();
    for (i, t) in texts.iter().enumerate() {
        let inp = scaled.encode(i, t, &opts).unwrap();
        let a = scaled.hidden_states(std::slice::from_ref(&inp)).unwrap();
        let b = plain.hidden_states(std::slice::from_ref(&inp)).unwrap();
        let d = common::max_abs_diff(&a, &b);
        if inp.ids.len() > 16 {
            assert!(
                d > 1e-3,
                "text {i} ({} tokens): scaling changed nothing",
                inp.ids.len()
            );
        } else {
            assert_eq!(
                d,
                0.0,
                "text {i} ({} tokens) is within the trained length",
                inp.ids.len()
            );
        }
    }
}

#[test]
fn remote_code_config_loads_the_same_model() {
    let tiny = fixtures().join("nomic-bert-tiny");
    let dir = copy_with_config(&tiny, "nomic-remote", &remote_spelling(&config_of(&tiny)));
    let e = load_embedder(&dir);
    assert_eq!((e.dim(), e.max_tokens()), (32, 24));
    check_hidden_states(&dir, 1e-4);
    check_embeddings(&dir, &["query"], 1e-5);
}

#[test]
fn unsupported_nomic_options_are_refused_by_name() {
    let tiny = fixtures().join("nomic-bert-tiny");
    let remote = remote_spelling(&config_of(&tiny));
    let cases = [
        ("rotary_emb_fraction", json!(0.5), "rotary_emb_fraction"),
        (
            "rotary_emb_interleaved",
            json!(true),
            "rotary_emb_interleaved",
        ),
        ("prenorm", json!(true), "prenorm"),
        (
            "activation_function",
            json!("gelu"),
            "activation_function 'gelu'",
        ),
        ("rotary_scaling_factor", json!(0.5), "factor ≥ 1"),
    ];
    for (i, (key, value, said)) in cases.into_iter().enumerate() {
        let mut cfg = remote.clone();
        cfg[key] = value;
        let dir = copy_with_config(&tiny, &format!("nomic-bad-{i}"), &cfg);
        let err = Embedder::load(&dir).unwrap_err().to_string();
        assert!(err.contains(said), "{key}: {err}");
        assert!(err.contains("config.json"), "{key}: {err}");
    }
    let mut cfg = config_of(&tiny);
    cfg["rope_parameters"] = json!({"rope_type": "yarn", "factor": 2.0, "rope_theta": 1000.0});
    let dir = copy_with_config(&tiny, "nomic-bad-yarn", &cfg);
    let err = Embedder::load(&dir).unwrap_err().to_string();
    assert!(err.contains("rope_type 'yarn'"), "{err}");
}
