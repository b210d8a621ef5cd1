//! The KV cache in each storage type (`--cache-type-k` / `--cache-type-v`) on tiny random
//! checkpoints against transformers float32: the prompt logits of the fixtures' long prompt
//! (prefilled in chunks of 7, so later chunks read stored keys) stay near the reference, and
//! the perplexity of the model over that prompt moves by little from the f32 cache's. Covers a
//! Llama (heads of 16: two heads per 32-value block), Gemma 3 (sliding rings), Gemma 4 (KV
//! shared layers, per-layer head dims) and Qwen 3.5 (full-attention layers beside recurrent
//! ones, whose state stays f32).

mod common;

use common::{fixtures, ids, max_abs_diff, prompt_logits, read_npy_f32, reference};
use oxinfer::plan::KvTypes;
use oxinfer::Model;
use oxinfer_kernels::attention::KvType;

/// Perplexity of `logits` (`[n, vocab]`) predicting `prompt[1..]`.
fn perplexity(logits: &[f32], prompt: &[u32], vocab: usize) -> f64 {
    let mut nll = 0f64;
    for (j, &next) in prompt.iter().enumerate().skip(1) {
        let row = &logits[(j - 1) * vocab..j * vocab];
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
        nll -= f64::from(row[next as usize] - max) - sum.ln();
    }
    (nll / (prompt.len() - 1) as f64).exp()
}

/// Per type: the largest logit difference to transformers allowed, and the relative
/// perplexity change allowed against the f32 cache. The logit bounds are a few quantization
/// steps of the cached values' scale on these checkpoints (f16: 2⁻¹¹ relative, bf16: 2⁻⁸,
/// q8_0: 1/254 of a block's largest value, q4_0: 1/16); the perplexity goal for q8_0 is the
/// issue's (within 0.5 %).
fn bounds(ty: KvType) -> (f32, f64) {
    match ty {
        KvType::F32 => (1e-4, 1e-6),
        KvType::F16 => (2e-3, 1e-3),
        KvType::Bf16 => (2e-2, 5e-3),
        KvType::Q8_0 => (2e-2, 5e-3),
        KvType::Q4_0 => (2e-1, 5e-2),
    }
}

fn check(fixture: &str) {
    let dir = fixtures().join(fixture);
    let r = reference(&dir);
    let p = r["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .max_by_key(|p| p["ids"].as_array().map_or(0, |a| a.len()))
        .expect("a prompt");
    let prompt = ids(&p["ids"]);
    let (_, want) = read_npy_f32(&dir.join(p["logits_file"].as_str().expect("file")));
    let mut f32_ppl = None;
    for ty in KvType::ALL {
        let model = Model::load(&dir)
            .unwrap()
            .with_kv_types(KvTypes { k: ty, v: ty });
        let vocab = model.config().vocab_size;
        let got = prompt_logits(&model, &prompt, 7);
        let d = max_abs_diff(&got, &want);
        let ppl = perplexity(&got, &prompt, vocab);
        let base = *f32_ppl.get_or_insert(ppl);
        let rel = (ppl - base).abs() / base;
        println!(
            "{fixture} ({} tokens) KV {ty}: max abs logit diff {d:.3e}, ppl {ppl:.5} ({:+.4} %)",
            prompt.len(),
            100.0 * (ppl - base) / base
        );
        let (max_d, max_rel) = bounds(ty);
        assert!(d <= max_d, "{fixture} KV {ty}: max abs logit diff {d}");
        assert!(rel <= max_rel, "{fixture} KV {ty}: ppl {ppl} vs f32 {base}");
    }
}

#[test]
fn llama_tiny() {
    check("llama-tiny-a");
}

#[test]
fn gemma3_tiny_sliding_rings() {
    check("gemma3-tiny-a");
}

#[test]
fn gemma4_tiny_shared_kv() {
    check("gemma4-tiny-dense");
}

#[test]
fn qwen35_tiny_hybrid() {
    check("qwen35-tiny");
}

/// Keys and values of different types mix (q8_0 keys, f16 values, and the reverse), and the
/// cache's bytes per position are the types' (q8_0: 34 bytes per 32 values).
#[test]
fn mixed_types_and_bytes_per_position() {
    let dir = fixtures().join("llama-tiny-a");
    let r = reference(&dir);
    let p = &r["prompts"][0];
    let prompt = ids(&p["ids"]);
    let (_, want) = read_npy_f32(&dir.join(p["logits_file"].as_str().expect("file")));
    for (k, v) in [(KvType::Q8_0, KvType::F16), (KvType::F16, KvType::Q8_0)] {
        let model = Model::load(&dir).unwrap().with_kv_types(KvTypes { k, v });
        let d = max_abs_diff(&prompt_logits(&model, &prompt, 3), &want);
        assert!(d <= bounds(KvType::Q8_0).0, "K {k} V {v}: {d}");
    }
    let c = Model::load(&dir).unwrap().config().clone();
    let width = c.n_kv_heads * c.head_dim;
    for ty in KvType::ALL {
        let model = Model::load(&dir)
            .unwrap()
            .with_kv_types(KvTypes { k: ty, v: ty });
        let lm = model.lm();
        let mut cache = lm.new_cache(prompt.len());
        lm.forward(&prompt, &mut cache, false).unwrap();
        let per_position = 2 * c.n_layers * ty.row_bytes(width);
        assert_eq!(cache.bytes_in_use(), prompt.len() * per_position, "{ty}");
        let f = model.kv_footprint(prompt.len());
        assert_eq!(f.global_per_position, per_position, "{ty}");
        assert_eq!(f.total_at_ctx, cache.bytes_in_use(), "{ty}");
    }
}
