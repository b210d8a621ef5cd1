//! SmolLM2-135M-Instruct Q4_1 (real GGUF) against transformers float32 on the dequantized
//! weights (tests/fixtures/smollm2/transformers_ref.json, made by
//! tools/ref/ref_smollm2_transformers.py): prompt token ids identical, logits within 1e-3
//! (last position over the whole vocabulary, every position on the reference top-20), and 32
//! greedy tokens identical, on raw and chat-templated prompts.

mod common;

use common::{fixtures, read_npy_f32, real_model};
use oxinfer::engine::sampler::argmax;
use oxinfer::{ChatMessage, Model};
use serde_json::Value;

const TOL: f32 = 1e-3;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn smollm2_matches_transformers() {
    // The scalar reference kernels: f32 activations, weights dequantized.
    std::env::set_var("OXINFER_KERNELS", "scalar");
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let dir = fixtures().join("smollm2");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("transformers_ref.json")).unwrap())
            .unwrap();
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
        for (pos, top) in p["top20"].as_array().unwrap().iter().enumerate() {
            for pair in top.as_array().unwrap() {
                let id = pair[0].as_u64().unwrap() as usize;
                let want = pair[1].as_f64().unwrap() as f32;
                let got = logits[pos * vocab + id];
                assert!(
                    (got - want).abs() <= TOL,
                    "{text:?} pos {pos} id {id}: {got} vs {want}"
                );
            }
        }

        // 32 greedy tokens, not stopping at EOS (as the reference did).
        let want_greedy = ids(&p["greedy_ids"]);
        let mut got_greedy = Vec::new();
        let mut next = argmax(&logits[(n - 1) * vocab..]);
        for _ in 0..want_greedy.len() {
            got_greedy.push(next);
            let l = lm.forward(&[next], &mut cache, false).unwrap();
            next = argmax(&l);
        }
        assert_eq!(got_greedy, want_greedy, "greedy tokens after {text:?}");
    }
    println!("worst last-position logit difference: {worst:e}");
}
