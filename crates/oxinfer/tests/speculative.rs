//! Speculative decoding (`engine::speculative`): prompt-lookup and draft-model speculation give
//! the plain greedy tokens token for token on the tiny fixtures (global, sliding-window and
//! recurrent caches), in sessions and in a batch of several slots; sampled output keeps the
//! target's distribution (chi-squared over many seeds); mismatched vocabularies are refused.

mod common;

use common::{fixtures, real_model, run_all};
use oxinfer::engine::batch::{BatchConfig, BatchGenerator, Finished};
use oxinfer::engine::speculative::{check_vocabularies, VocabMismatch, VocabSide};
use oxinfer::engine::{GenerateOptions, Generation, SamplingParams, SeqRequest, Speculation};
use oxinfer::Model;

fn load(name: &str) -> Model {
    Model::load(fixtures().join(name)).unwrap_or_else(|e| panic!("load {name}: {e}"))
}

/// A prompt that repeats a pseudo-random phrase of `phrase` ids `times` times, so that
/// prompt lookup finds n-grams to copy.
fn repetitive_prompt(seed: u64, phrase: usize, times: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let p: Vec<u32> = (0..phrase)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect();
    p.iter().copied().cycle().take(phrase * times).collect()
}

fn opts(max_tokens: usize, sampling: SamplingParams, speculation: Speculation) -> GenerateOptions {
    GenerateOptions {
        max_tokens,
        sampling,
        speculation,
        ..GenerateOptions::default()
    }
}

fn generate(model: &Model, prompt: &[u32], o: &GenerateOptions) -> Generation {
    model
        .session(Some(256))
        .generate(prompt, o, |_| true)
        .expect("generate")
}

/// Greedy with `--lookup` equals plain greedy on every cache kind; drafts were made, some
/// accepted and (on most models) some rejected, so the rollback ran.
#[test]
fn lookup_greedy_matches_plain_greedy() {
    let mut rejected_somewhere = false;
    for name in [
        "llama-tiny-a",
        "gemma3-tiny-a",
        "qwen2-tiny-swa",
        "qwen3-tiny",
        "qwen35-tiny",
    ] {
        let model = load(name);
        let vocab = model.config().vocab_size;
        for seed in 1..4 {
            let prompt = repetitive_prompt(seed, 7, 5, vocab);
            let plain = generate(
                &model,
                &prompt,
                &opts(40, SamplingParams::greedy(), Speculation::default()),
            );
            let spec = generate(
                &model,
                &prompt,
                &opts(40, SamplingParams::greedy(), Speculation::lookup(5)),
            );
            assert_eq!(spec.tokens, plain.tokens, "{name} seed {seed}");
            assert_eq!(spec.stop_reason, plain.stop_reason, "{name} seed {seed}");
            let d = spec.timings.draft;
            if name == "qwen35-tiny" {
                // Recurrent state cannot rewind: no drafts, plain decoding.
                assert_eq!(d.drafted, 0, "{name}");
            } else {
                assert!(d.drafted > 0, "{name} seed {seed}: nothing drafted");
                rejected_somewhere |= d.accepted < d.drafted;
            }
        }
    }
    assert!(rejected_somewhere, "no draft was ever rejected");
}

/// Speculating sequences batched with plain ones give each one's tokens alone.
#[test]
fn lookup_in_a_batch_matches_each_alone() {
    let model = load("gemma3-tiny-a");
    let vocab = model.config().vocab_size;
    let seeded = SamplingParams {
        temperature: 0.9,
        top_k: 8,
        seed: 3,
        ..SamplingParams::default()
    };
    let reqs: Vec<SeqRequest> = [
        (1, SamplingParams::greedy(), Speculation::lookup(4)),
        (2, SamplingParams::greedy(), Speculation::default()),
        (3, seeded.clone(), Speculation::default()),
        (4, SamplingParams::greedy(), Speculation::lookup(8)),
    ]
    .into_iter()
    .map(|(seed, s, spec)| SeqRequest {
        prompt: repetitive_prompt(seed, 5 + seed as usize, 6, vocab),
        opts: opts(30, s, spec),
    })
    .collect();
    let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(4, 256));
    for (i, r) in reqs.iter().enumerate() {
        batch.admit(r.clone(), i).expect("admit");
    }
    let mut done: Vec<Option<Finished>> = vec![None; reqs.len()];
    run_all(&mut batch, &mut done);
    for (i, r) in reqs.iter().enumerate() {
        let mut plain = r.opts.clone();
        plain.speculation = Speculation::default();
        let alone = generate(&model, &r.prompt, &plain);
        let f = done[i].as_ref().expect("finished");
        assert_eq!(f.tokens, alone.tokens, "request {i}");
    }
}

/// Draft-model speculation: the target drafting for itself accepts everything; another tiny
/// model of the same vocabulary drafts worse, and the output is still the plain greedy one.
#[test]
fn draft_model_greedy_matches_plain_greedy() {
    let target = load("llama-tiny-a");
    let other = load("llama-tiny-b");
    let vocab = target.config().vocab_size;
    let spec = Speculation {
        draft_max: 4,
        ..Speculation::default()
    };
    for seed in 1..4 {
        let prompt = repetitive_prompt(seed, 9, 2, vocab);
        let plain = generate(
            &target,
            &prompt,
            &opts(30, SamplingParams::greedy(), Speculation::default()),
        );
        for (draft, all_accepted) in [(&target, true), (&other, false)] {
            let mut s = target.session(Some(256));
            s.set_draft(draft).expect("same vocabulary");
            let o = opts(30, SamplingParams::greedy(), spec);
            let g = s.generate(&prompt, &o, |_| true).expect("generate");
            assert_eq!(
                g.tokens, plain.tokens,
                "seed {seed}, self-draft {all_accepted}"
            );
            let d = g.timings.draft;
            assert!(d.drafted > 0);
            if all_accepted {
                assert_eq!(d.accepted, d.drafted, "a model drafting for itself");
            }
            // A second turn in the same session reuses both caches.
            let mut turn2 = prompt.clone();
            turn2.extend(&g.tokens);
            turn2.extend(repetitive_prompt(seed + 10, 3, 1, vocab));
            let again = s.generate(&turn2, &o, |_| true).expect("turn 2");
            let fresh = generate(
                &target,
                &turn2,
                &opts(30, SamplingParams::greedy(), Speculation::default()),
            );
            assert_eq!(again.tokens, fresh.tokens, "seed {seed}: second turn");
        }
    }
}

/// Vocabularies are compared at load: token ids spelled differently are named (the real
/// SmolLM2 and Gemma 3 models).
#[test]
fn vocabulary_mismatch_names_the_token() {
    let (Some(a), Some(b)) = (
        real_model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        real_model("gemma-3-270m-q4_k_m.gguf"),
    ) else {
        return;
    };
    let (a, b) = (
        Model::load(&a).expect("smollm2"),
        Model::load(&b).expect("gemma"),
    );
    fn side(m: &Model) -> VocabSide<'_> {
        VocabSide {
            tokenizer: m.tokenizer(),
            n_logits: m.config().vocab_size,
        }
    }
    assert!(check_vocabularies(side(&a), side(&a)).is_ok());
    let e = check_vocabularies(side(&a), side(&b)).expect_err("different vocabularies");
    assert!(matches!(e, VocabMismatch::Token { .. }), "{e}");
    assert!(e.to_string().contains("at token"), "{e}");
    let mut s = a.session(Some(64));
    let err = s.set_draft(&b).expect_err("refused").to_string();
    assert!(err.contains("vocabulary differs"), "{err}");
}

/// Widths of tokenizer-less models must agree.
#[test]
fn tokenizerless_vocabularies_compare_by_width() {
    let side = |n| VocabSide {
        tokenizer: None,
        n_logits: n,
    };
    assert!(check_vocabularies(side(260), side(260)).is_ok());
    assert_eq!(
        check_vocabularies(side(260), side(300)),
        Err(VocabMismatch::Size {
            target: 260,
            draft: 300
        })
    );
}

/// Chi-squared statistic of two equally sized samples over the same categories and the
/// critical value at p = 0.001 for its degrees of freedom (Wilson–Hilferty).
fn chi_squared(a: &[usize], b: &[usize]) -> (f64, f64) {
    let mut stat = 0.0;
    let mut cells = 0usize;
    for (&x, &y) in a.iter().zip(b) {
        if x + y > 0 {
            stat += (x as f64 - y as f64).powi(2) / (x + y) as f64;
            cells += 1;
        }
    }
    let dof = (cells.max(2) - 1) as f64;
    let z = 3.09;
    let h = 2.0 / (9.0 * dof);
    (stat, dof * (1.0 - h + z * h.sqrt()).powi(3))
}

/// Sampled output with lookup drafts follows the target's own sampling: the distribution of
/// the fourth generated token (after tokens where drafts were verified) over many seeds
/// agrees with plain sampling's by a chi-squared test; the first two tokens' pair too.
#[test]
fn lookup_sampling_keeps_the_target_distribution() {
    let model = load("llama-tiny-a");
    let vocab = model.config().vocab_size;
    // Base text and the model's greedy continuation of it, which falls into repeating a
    // token: sampling then often continues the repetition, which lookup drafts.
    let base = repetitive_prompt(1, 12, 1, vocab);
    let mut prompt = base.clone();
    prompt.extend(
        generate(
            &model,
            &base,
            &opts(40, SamplingParams::greedy(), Speculation::default()),
        )
        .tokens,
    );
    let sampling = |seed| SamplingParams {
        temperature: 1.0,
        top_k: 6,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingParams::default()
    };
    let seeds = 1500u64;
    let mut counts = [vec![0usize; vocab], vec![0usize; vocab]];
    let mut pairs = [
        std::collections::HashMap::new(),
        std::collections::HashMap::new(),
    ];
    let mut drafted = 0;
    let mut accepted = 0;
    for (k, spec) in [Speculation::default(), Speculation::lookup(4)]
        .into_iter()
        .enumerate()
    {
        let mut session = model.session(Some(64));
        for seed in 0..seeds {
            // Seeds of the two runs differ so that their draws are independent.
            let o = opts(4, sampling(seed * 2 + k as u64), spec);
            let g = session.generate(&prompt, &o, |_| true).expect("generate");
            counts[k][g.tokens[3] as usize] += 1;
            *pairs[k].entry((g.tokens[0], g.tokens[1])).or_insert(0usize) += 1;
            drafted += g.timings.draft.drafted;
            accepted += g.timings.draft.accepted;
        }
    }
    common::visible_line(&format!(
        "lookup sampling: {accepted} of {drafted} drafts accepted"
    ));
    assert!(
        accepted > 100 && accepted < drafted,
        "{accepted} of {drafted}"
    );
    let (stat, crit) = chi_squared(&counts[0], &counts[1]);
    common::visible_line(&format!(
        "fourth token: chi² {stat:.1} (p = 0.001 at {crit:.1})"
    ));
    assert!(stat < crit, "fourth token: chi² {stat:.1} ≥ {crit:.1}");
    let keys: std::collections::BTreeSet<_> =
        pairs[0].keys().chain(pairs[1].keys()).copied().collect();
    let count = |k: usize| -> Vec<usize> {
        keys.iter()
            .map(|p| pairs[k].get(p).copied().unwrap_or(0))
            .collect()
    };
    let (stat, crit) = chi_squared(&count(0), &count(1));
    common::visible_line(&format!(
        "token pairs: chi² {stat:.1} (p = 0.001 at {crit:.1})"
    ));
    assert!(stat < crit, "first two tokens: chi² {stat:.1} ≥ {crit:.1}");
}
