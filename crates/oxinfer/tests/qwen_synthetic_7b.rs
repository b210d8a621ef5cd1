//! The synthetic Qwen2-7B-geometry Q4_K_M GGUF (tools/ref/make_synthetic_7b.py, random weights,
//! ~4.4 GiB under the test-models folder) against llama.cpp
//! (tools/ref/ref_synthetic_7b_llamacpp.py): same tokens for the text, perplexity over the
//! same windows within 1 %. Skipped, with one line, when the file is absent.

mod common;

use common::{agreement, fixture_json, fixtures, ids, ids_flat, real_model};
use oxinfer::engine::perplexity::perplexity;
use oxinfer::Model;
use std::time::Instant;

/// Ignored by default: about 7 minutes on 2 cores. Run with
/// `cargo test --release -p oxinfer --test qwen_synthetic_7b -- --ignored --nocapture`.
#[test]
#[ignore]
fn synthetic_qwen2_7b_q4_k_m_perplexity_matches_llamacpp() {
    let Some(path) = real_model("qwen2-7b-synthetic-q4_k_m.gguf") else {
        return;
    };
    let r = fixture_json("qwen2-7b-synthetic/llamacpp_ppl.json");
    let model = Model::load(&path).expect("load");
    let cfg = model.config();
    assert_eq!(
        (cfg.hidden_size, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads),
        (3584, 28, 28, 4)
    );
    assert_eq!((cfg.intermediate_size, cfg.vocab_size), (18944, 152064));
    let want_tokens = ids(&r["tokens"]);
    let text = std::fs::read_to_string(fixtures().join("texts/ppl-en.txt")).unwrap();
    let got = model.tokenize(&text, false).expect("tokenize");
    assert_eq!(&got[..want_tokens.len()], &want_tokens[..], "tokens differ");
    let ctx = r["n_ctx"].as_u64().unwrap() as usize;
    let t0 = Instant::now();
    let p = perplexity(model.lm(), &want_tokens, ctx, None, None, 512, |_, _, _| {}).unwrap();
    let want = r["ppl"].as_f64().unwrap();
    let agree = agreement(&p.top1, &ids_flat(&r["top1_ids"]));
    let rel = (p.ppl - want).abs() / want;
    println!(
        "synthetic 7B: oxinfer PPL {:.2} vs llama.cpp {want:.2} ({:.3} %), top-1 agreement {:.1} %, {} chunks of {ctx} in {:.1} s",
        p.ppl,
        100.0 * rel,
        100.0 * agree,
        p.chunks,
        t0.elapsed().as_secs_f64()
    );
    assert!(rel < 0.01, "perplexity {} vs llama.cpp {want}", p.ppl);
}
