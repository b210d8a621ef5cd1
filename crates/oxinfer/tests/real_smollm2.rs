//! SmolLM2-135M-Instruct Q4_1 (real GGUF) against transformers float32 on the dequantized
//! weights (tests/fixtures/smollm2/transformers_ref.json, made by
//! tools/ref/ref_smollm2_transformers.py): prompt token ids identical, logits within 1e-3
//! (last position over the whole vocabulary, every position on the reference top-20), and 32
//! greedy tokens identical, on raw and chat-templated prompts.

mod common;

use common::{check_top20, fixture_json, fixtures, greedy_continue, ids, read_npy_f32, real_model};
use oxinfer::{ChatMessage, Model};
use serde_json::Value;

const TOL: f32 = 1e-3;

#[test]
fn smollm2_matches_transformers() {
    // The scalar reference kernels: f32 activations, weights dequantized.
    std::env::set_var("OXINFER_KERNELS", "scalar");
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = fixtures().join("smollm2");
    let r = fixture_json("smollm2/transformers_ref.json");
    let model = Model::load(&path).expect("load");
    let lm = model.lm();
    let vocab = model.config().vocab_size;
    let mut worst = 0f32;
    for p in r["prompts"].as_array().unwrap() {
        let text = p["text"].as_str().unwrap();
        let want_ids = ids(&p["ids"]);
        let got_ids = if p["kind"] == "chat" {
            let rendered = model
                .render_chat(&[ChatMessage::new("user", text)], true, &Value::Null)
                .unwrap();
            assert_eq!(
                rendered,
                p["rendered"].as_str().unwrap(),
                "rendered chat prompt"
            );
            model.tokenize(&rendered, false).unwrap()
        } else {
            model.tokenize(text, model.adds_bos()).unwrap()
        };
        assert_eq!(got_ids, want_ids, "prompt ids of {text:?}");

        let mut cache = lm.new_cache(256);
        let logits = lm.forward(&got_ids, &mut cache, true).unwrap();
        let n = got_ids.len();
        let (_, last) = read_npy_f32(&dir.join(p["logits_file"].as_str().unwrap()));
        let d = common::max_abs_diff(&logits[(n - 1) * vocab..], &last);
        worst = worst.max(d);
        assert!(d <= TOL, "{text:?}: last-position max abs logit diff {d}");
        check_top20(&logits, vocab, 0, &p["top20"], TOL, &format!("{text:?}"));

        // 32 greedy tokens, not stopping at EOS (as the reference did).
        let want_greedy = ids(&p["greedy_ids"]);
        let last = &logits[(n - 1) * vocab..];
        let got_greedy = greedy_continue(&model, &mut cache, last, want_greedy.len());
        assert_eq!(got_greedy, want_greedy, "greedy tokens after {text:?}");
    }
    println!("worst last-position logit difference: {worst:e}");
}
