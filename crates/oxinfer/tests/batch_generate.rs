//! The engine's batch generator (`engine::batch`): sequences generated together match each
//! generated alone, prefix reuse, admission errors, cancellation, prompt logits, and (on the
//! real SmolLM2 when present) stop strings, EOS, grammar and log-probabilities.

mod common;

use common::{fixtures, real_model, run_all, step_once};
use oxinfer::engine::batch::{BatchConfig, BatchGenerator, Finished, Rejected, SeqEvent};
use oxinfer::engine::grammar::Grammar;
use oxinfer::engine::{GenerateOptions, SamplingParams, SeqRequest, StopReason};
use oxinfer::Model;
use std::sync::Arc;

fn tiny() -> Model {
    Model::load(fixtures().join("llama-tiny-a")).expect("load llama-tiny-a")
}

/// `n` pseudo-random ids below `vocab` (a fixed sequence per `seed`).
fn prompt(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

fn request(prompt: Vec<u32>, max_tokens: usize, sampling: SamplingParams) -> SeqRequest {
    SeqRequest {
        prompt,
        opts: GenerateOptions {
            max_tokens,
            sampling,
            ..GenerateOptions::default()
        },
    }
}

#[test]
fn sequences_batched_together_match_each_alone() {
    let model = tiny();
    let vocab = model.config().vocab_size;
    let seeded = SamplingParams {
        temperature: 0.9,
        top_k: 0,
        seed: 11,
        ..SamplingParams::default()
    };
    let penalised = SamplingParams {
        repeat_penalty: 1.3,
        presence_penalty: 0.5,
        frequency_penalty: 0.5,
        seed: 5,
        ..SamplingParams::default()
    };
    // Lengths beyond the 128-token shared prefill budget make the prompts run in pieces while
    // the others decode.
    let reqs = [
        request(prompt(1, 5, vocab), 12, SamplingParams::greedy()),
        request(prompt(2, 300, vocab), 20, seeded),
        request(prompt(3, 140, vocab), 16, penalised),
    ];
    let alone: Vec<Vec<u32>> = reqs
        .iter()
        .map(|r| {
            let mut s = model.session(Some(512));
            s.generate(&r.prompt, &r.opts, |_| true)
                .expect("alone")
                .tokens
        })
        .collect();
    // The free function over a caller's cache is the same loop.
    for (r, want) in reqs.iter().zip(&alone) {
        let mut cache = model.lm().new_cache(512);
        let g = oxinfer::engine::generate::generate(
            model.lm(),
            None,
            &mut cache,
            &r.prompt,
            &r.opts,
            |_| true,
        )
        .expect("generate");
        assert_eq!(&g.tokens, want, "free generate vs session");
    }
    let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(3, 512));
    let mut done: Vec<Option<Finished>> = vec![None; 3];
    batch.admit(reqs[0].clone(), 0).expect("admit 0");
    batch.admit(reqs[1].clone(), 1).expect("admit 1");
    // The third joins while the others are under way.
    for _ in 0..3 {
        step_once(&mut batch, &mut done);
    }
    batch.admit(reqs[2].clone(), 2).expect("admit 2");
    run_all(&mut batch, &mut done);
    for (i, want) in alone.iter().enumerate() {
        let f = done[i].as_ref().expect("finished");
        assert_eq!(&f.tokens, want, "sequence {i}: batched vs alone");
        assert_eq!(f.reason, StopReason::MaxTokens);
        assert_eq!(f.prompt_tokens, reqs[i].prompt.len());
        assert_eq!(f.cached_tokens, 0);
    }
}

#[test]
fn a_follow_up_reuses_the_slot_holding_its_prefix() {
    let model = tiny();
    let vocab = model.config().vocab_size;
    let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(2, 256));
    let mut done: Vec<Option<Finished>> = vec![None; 3];
    let a = prompt(7, 30, vocab);
    batch
        .admit(request(a.clone(), 8, SamplingParams::greedy()), 0)
        .unwrap();
    run_all(&mut batch, &mut done);
    let b = prompt(8, 30, vocab);
    batch
        .admit(request(b, 8, SamplingParams::greedy()), 1)
        .unwrap();
    run_all(&mut batch, &mut done);
    let gen_a = done[0].as_ref().unwrap().tokens.clone();
    // The next turn of conversation `a`: everything so far plus new tokens.
    let mut next = a.clone();
    next.extend(&gen_a);
    next.extend(prompt(9, 5, vocab));
    batch
        .admit(request(next.clone(), 4, SamplingParams::greedy()), 2)
        .unwrap();
    run_all(&mut batch, &mut done);
    let f = done[2].as_ref().unwrap();
    // The last sampled token of `a` was never run, so the cache holds all but it.
    assert_eq!(f.cached_tokens, a.len() + gen_a.len() - 1);
    assert_eq!(f.timings.prompt_tokens, next.len() - f.cached_tokens);
    let slot = (0..2)
        .find(|&s| batch.cached_tokens(s).starts_with(&a))
        .expect("a slot holds conversation a");
    let held = batch.cached_tokens(slot);
    assert_eq!(held.len(), next.len() + f.tokens.len() - 1);
    assert_eq!(&held[..next.len()], &next[..]);
}

#[test]
fn penalties_see_the_whole_conversation_whatever_the_cache_holds() {
    let model = tiny();
    let vocab = model.config().vocab_size;
    let opts = GenerateOptions {
        max_tokens: 16,
        sampling: SamplingParams {
            repeat_penalty: 3.0,
            presence_penalty: 2.0,
            frequency_penalty: 2.0,
            ..SamplingParams::greedy()
        },
        ..GenerateOptions::default()
    };
    let first = prompt(21, 40, vocab);
    let mut warm = model.session(Some(256));
    let reply = warm.generate(&first, &opts, |_| true).unwrap().tokens;
    let mut turn2 = first.clone();
    turn2.extend(&reply);
    turn2.extend(prompt(22, 3, vocab));
    let reused = warm.generate(&turn2, &opts, |_| true).unwrap();
    let fresh = model
        .session(Some(256))
        .generate(&turn2, &opts, |_| true)
        .unwrap();
    assert_eq!(
        reused.tokens, fresh.tokens,
        "same conversation, same tokens"
    );
}

#[test]
fn requests_that_cannot_run_are_refused_with_their_tag() {
    let model = tiny();
    let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(1, 16));
    let invalid = |batch: &mut BatchGenerator<'_, usize>, req: SeqRequest, needle: &str| match batch
        .admit(req, 7)
    {
        Err(Rejected::Invalid { error, tag }) => {
            assert_eq!(tag, 7);
            assert!(error.to_string().contains(needle), "{error}");
        }
        other => panic!("expected an invalid request ({needle}), got {other:?}"),
    };
    invalid(
        &mut batch,
        request(vec![], 4, SamplingParams::greedy()),
        "empty",
    );
    invalid(
        &mut batch,
        request(vec![1; 20], 4, SamplingParams::greedy()),
        "exceeds the context (16 tokens) by 4",
    );
    let bad = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::default()
    };
    invalid(&mut batch, request(vec![1, 2], 4, bad), "temperature");
    let mut with_grammar = request(vec![1, 2], 4, SamplingParams::greedy());
    let schema = serde_json::json!({"type": "object"});
    with_grammar.opts.grammar = Some(Arc::new(Grammar::from_schema(&schema).expect("grammar")));
    invalid(&mut batch, with_grammar, "tokenizer");
    batch
        .admit(request(vec![1, 2], 4, SamplingParams::greedy()), 1)
        .expect("a free slot");
    match batch.admit(request(vec![3], 4, SamplingParams::greedy()), 2) {
        Err(Rejected::Busy { req, tag }) => assert_eq!((req.prompt, tag), (vec![3], 2)),
        other => panic!("expected busy, got {other:?}"),
    }
}

#[test]
fn cancelling_ends_a_sequence_and_frees_its_slot() {
    let model = tiny();
    let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(2, 64));
    batch
        .admit(request(vec![1, 2, 3], 10, SamplingParams::greedy()), 0)
        .unwrap();
    batch
        .admit(request(vec![4, 5, 6], 10, SamplingParams::greedy()), 1)
        .unwrap();
    let mut finished = Vec::new();
    let mut tokens = [0usize; 2];
    while !batch.is_idle() {
        batch
            .step(|&mut i, ev| match ev {
                SeqEvent::Token { .. } => {
                    tokens[i] += 1;
                    // Sequence 0 stops after its first token.
                    i != 0
                }
                SeqEvent::Finished(f) => {
                    finished.push((i, f.reason, f.tokens.len()));
                    true
                }
                SeqEvent::Text(_) => true,
            })
            .unwrap();
    }
    finished.sort_by_key(|f| f.0);
    assert_eq!(
        finished,
        [
            (0, StopReason::Cancelled, 1),
            (1, StopReason::MaxTokens, 10)
        ]
    );
    assert_eq!(tokens, [1, 10]);
    // Dropped without events, by tag.
    batch
        .admit(request(vec![1, 2], 10, SamplingParams::greedy()), 5)
        .unwrap();
    assert_eq!(batch.cancel_where(|&t| t == 5), 1);
    assert!(batch.is_idle());
}

#[test]
fn zero_max_tokens_runs_the_prompt_and_keeps_its_logits() {
    let model = tiny();
    let vocab = model.config().vocab_size;
    let p = prompt(4, 9, vocab);
    let opts = GenerateOptions {
        max_tokens: 0,
        keep_prompt_logits: true,
        prefill_chunk: 4,
        ..GenerateOptions::default()
    };
    let mut session = model.session(Some(64));
    let g = session.generate(&p, &opts, |_| true).unwrap();
    assert!(g.tokens.is_empty());
    assert_eq!(g.stop_reason, StopReason::MaxTokens);
    let want = common::prompt_logits(&model, &p, 4);
    assert_eq!(g.prompt_logits.as_deref(), Some(&want[..]));
    assert_eq!(session.cached_tokens(), &p[..]);
}

/// Events of one sequence generated on the real SmolLM2: the streamed text and the end.
fn run_one(model: &Model, req: SeqRequest) -> (String, Vec<SeqEvent>, Finished) {
    let mut batch = BatchGenerator::new(model.lm(), model.tokenizer(), &BatchConfig::new(1, 512));
    batch.admit(req, ()).map_err(|r| r.into_parts().0).unwrap();
    let mut events = Vec::new();
    while !batch.is_idle() {
        batch
            .step(|_, ev| {
                events.push(ev);
                true
            })
            .unwrap();
    }
    let Some(SeqEvent::Finished(f)) = events.pop() else {
        panic!("the last event is the end");
    };
    let text = events
        .iter()
        .map(|e| match e {
            SeqEvent::Token { text, .. } | SeqEvent::Text(text) => text.as_str(),
            SeqEvent::Finished(_) => panic!("finished twice"),
        })
        .collect();
    (text, events, f)
}

#[test]
fn stop_strings_eos_grammar_and_logprobs_on_smollm2() {
    let Some(path) = real_model("SmolLM2-135M-Instruct.Q4_1.gguf") else {
        return;
    };
    let model = Model::load(&path).expect("load");
    let chat = |text: &str| {
        model
            .chat_tokens(&[oxinfer::ChatMessage::new("user", text)])
            .unwrap()
    };
    // Unconstrained greedy text: what the stop string is cut from.
    let count = chat("Count from 1 to 20, separated by commas.");
    let mut req = request(count.clone(), 60, SamplingParams::greedy());
    req.opts.logprobs = Some(3);
    let (full, events, _) = run_one(&model, req);
    // Greedy: the chosen token is the most likely one, listed first among three.
    for e in &events {
        if let SeqEvent::Token { id, logprob, .. } = e {
            let lp = logprob.as_ref().expect("logprobs asked for");
            assert_eq!(lp.top.len(), 3);
            assert_eq!(lp.top[0], (*id, lp.logprob));
        }
    }
    let stop = "5";
    let at = full.find(stop).expect("the count reaches 5");
    let mut req = request(count, 60, SamplingParams::greedy());
    req.opts.stop = vec![stop.to_string()];
    let (text, _, f) = run_one(&model, req);
    assert_eq!(f.reason, StopReason::StopString);
    assert_eq!(text, full[..at]);

    // A JSON schema: the output parses and ends as the grammar completes.
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"]
    });
    let mut req = request(chat("Give me a person."), 80, SamplingParams::greedy());
    req.opts.grammar = Some(Arc::new(Grammar::from_schema(&schema).unwrap()));
    let (text, _, f) = run_one(&model, req);
    assert_eq!(f.reason, StopReason::Eos, "{text}");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(doc["name"].is_string() && doc["age"].is_i64(), "{doc}");
}

/// Greedy sequences without log-probabilities run passes that return only each row's argmax
/// (`forward_batch_argmax`); asking for log-probabilities brings the whole rows back. Both give
/// the same tokens, batched, with prompts long enough to be prefilled in pieces.
#[test]
fn argmax_passes_match_whole_logit_rows() {
    let model = tiny();
    let vocab = model.config().vocab_size;
    let run = |logprobs: Option<usize>| {
        let mut batch = BatchGenerator::new(model.lm(), None, &BatchConfig::new(3, 512));
        let mut done: Vec<Option<Finished>> = vec![None; 3];
        for (i, n) in [7usize, 200, 33].into_iter().enumerate() {
            let mut r = request(
                prompt(20 + i as u64, n, vocab),
                14,
                SamplingParams::greedy(),
            );
            r.opts.logprobs = logprobs;
            batch.admit(r, i).expect("admit");
        }
        run_all(&mut batch, &mut done);
        done.into_iter()
            .map(|f| f.expect("finished").tokens)
            .collect::<Vec<_>>()
    };
    let (argmax, whole) = (run(None), run(Some(1)));
    assert!(argmax.iter().all(|t| t.len() == 14));
    assert_eq!(argmax, whole);
}
