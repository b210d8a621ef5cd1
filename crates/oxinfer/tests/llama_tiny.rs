//! Tiny random Llama checkpoints against transformers float32 (fixtures made by
//! tools/ref/make_tiny_llama.py): prompt logits within 1e-4 and identical greedy tokens, from
//! both the safetensors folder and its GGUF twin, with chunked prefill and one-token steps.

mod common;

use common::{check_prompt, fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::engine::sampler::argmax;
use oxinfer::Model;

const TOL: f32 = 1e-4;

fn check_variant(name: &str) {
    let dir = fixtures().join(name);
    let r = reference(&dir);
    for source in [dir.clone(), dir.join("model.gguf")] {
        let model = Model::load(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
        for p in r["prompts"].as_array().expect("prompts") {
            check_prompt(&model, &source, &dir, p, &[0, 7, 1], TOL);
        }
    }
}

#[test]
fn llama_tiny_a_tied_gqa_transformers5_config() {
    check_variant("llama-tiny-a");
}

#[test]
fn llama_tiny_b_untied_llama3_rope_hub_config_sharded() {
    check_variant("llama-tiny-b");
}

/// Two sequences in one batched pass (prefill of both prompts, then a decode step of both)
/// give each sequence's own reference logits.
#[test]
fn batched_sequences_match_their_references() {
    use oxinfer::arch::SeqBatch;
    let dir = fixtures().join("llama-tiny-a");
    let r = reference(&dir);
    let model = Model::load(dir.join("model.gguf")).unwrap();
    let lm = model.lm();
    let prompts: Vec<Vec<u32>> = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| ids(&p["ids"]))
        .collect();
    let wants: Vec<Vec<f32>> = r["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| read_npy_f32(&dir.join(p["logits_file"].as_str().unwrap())).1)
        .collect();
    let mut c0 = lm.new_cache(256);
    let mut c1 = lm.new_cache(256);
    // The first prompt minus its last token with all logits, the second whole.
    let (p0, p1) = (&prompts[0], &prompts[1]);
    let n0 = p0.len() - 1;
    let out = {
        let mut batch = [
            SeqBatch {
                tokens: &p0[..n0],
                cache: &mut c0,
                all_logits: true,
            },
            SeqBatch {
                tokens: p1,
                cache: &mut c1,
                all_logits: true,
            },
        ];
        lm.forward_batch(&mut batch).unwrap()
    };
    let vocab = model.config().vocab_size;
    assert!(max_abs_diff(&out[0], &wants[0][..n0 * vocab]) <= TOL);
    assert!(max_abs_diff(&out[1], &wants[1]) <= TOL);
    // A decode-style step: the last prompt token of sequence 0 alongside one token of sequence 1.
    let next1 = argmax(&out[1][(p1.len() - 1) * vocab..]);
    let step = {
        let mut batch = [
            SeqBatch {
                tokens: &p0[n0..],
                cache: &mut c0,
                all_logits: false,
            },
            SeqBatch {
                tokens: &[next1],
                cache: &mut c1,
                all_logits: false,
            },
        ];
        lm.forward_batch(&mut batch).unwrap()
    };
    assert!(max_abs_diff(&step[0], &wants[0][n0 * vocab..]) <= TOL);
    // Sequence 1's step equals running it alone.
    let mut alone = lm.new_cache(256);
    lm.forward(p1, &mut alone, false).unwrap();
    let want1 = lm.forward(&[next1], &mut alone, false).unwrap();
    assert!(max_abs_diff(&step[1], &want1) <= 1e-5);
}
