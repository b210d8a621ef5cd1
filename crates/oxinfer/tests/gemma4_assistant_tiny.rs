//! Gemma 4's drafter (transformers `gemma4_assistant`) on a tiny checkpoint drafting for
//! gemma4-tiny-dense (fixture and references by tools/ref/make_tiny_gemma4_assistant.py):
//! every drafting round of transformers' assisted generation, recomputed from the target's
//! cache and last hidden state, gives transformers' draft tokens, and its logits within 1e-4 of
//! float64 at the first step (within transformers' own float32 rounding down the chain).

mod common;

use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference};
use oxinfer::arch::gemma::gemma4::Gemma4;
use oxinfer::arch::gemma::gemma4_assistant::Gemma4Drafter;
use oxinfer::arch::{CausalLm, SeqBatch};
use oxinfer::config::{read_config_json, ConfigSource, ModelConfig};
use oxinfer::loader::safetensors::SafetensorsModel;
use oxinfer::loader::Naming;
use std::path::Path;

const TOL: f32 = 1e-4;

fn load_target(dir: &Path) -> Gemma4 {
    let cfg_path = dir.join("config.json");
    let json = read_config_json(&cfg_path).unwrap();
    let cfg = ModelConfig::from_config_value(&cfg_path, &json).unwrap();
    let st = SafetensorsModel::open(dir).unwrap();
    let src = ConfigSource::Json {
        path: &cfg_path,
        json: &json,
    };
    Gemma4::load(&cfg, &st, Naming::Hf, &src).unwrap()
}

/// Each round: the target runs the context but its last token (caching 1 row beyond the
/// window for the drafter's sliding layer), then the drafter drafts 4 tokens from the target's
/// cache, the last token and the target's final-normed hidden state of the position before.
/// The draft ids equal transformers' clean recomputation (and generate()'s candidates in the
/// rounds where generate() handed the drafter the same keys; see the script for the others).
/// The logits are compared with the float64 recomputation: the first step within 1e-4; step k
/// of the chain within the larger of 1e-4 and transformers' own float32 distance from float64
/// at that step (rounding grows down the chain: 5.9e-5, 2.0e-4, 2.7e-4, 7.1e-4).
#[test]
fn gemma4_drafter_rounds_match_transformers() {
    let target = load_target(&fixtures().join("gemma4-tiny-dense"));
    let dir = fixtures().join("gemma4-assistant-tiny");
    let drafter = Gemma4Drafter::load(&dir, &target).unwrap();
    let r = reference(&dir);
    let mut seq = ids(&r["prompt"]);
    seq.extend(ids(&r["greedy_ids"]));
    let (shape, want) = read_npy_f32(&dir.join("logits_rounds_f64.npy"));
    let (_, generated) = read_npy_f32(&dir.join("logits_generate.npy"));
    let (n, vocab) = (shape[1], shape[2]);
    let bound: Vec<f32> = r["float32_vs_float64_max_abs_diff_per_step"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(k, v)| {
            if k == 0 {
                TOL
            } else {
                TOL.max(v.as_f64().unwrap() as f32)
            }
        })
        .collect();
    let dim = target.config().hidden_size;
    let rounds = r["rounds"].as_array().unwrap();
    assert_eq!((rounds.len(), bound.len()), (shape[0], n));
    let mut worst = vec![0f32; n];
    let (mut worst_generate, mut same_as_generate) = (0f32, 0);
    for (ri, round) in rounds.iter().enumerate() {
        let p = round["context_len"].as_u64().unwrap() as usize - 1;
        let mut cache = target.new_cache(64);
        cache.keep_rewind(1);
        let h = target
            .forward_hidden(&mut [SeqBatch {
                tokens: &seq[..p],
                cache: &mut cache,
                all_logits: false,
                media: None,
            }])
            .unwrap();
        cache.advance(p);
        let last = &h[(p - 1) * dim..p * dim];
        let drafted = drafter.draft(&target, &mut cache, seq[p], last, n).unwrap();
        let got_ids: Vec<u32> = drafted.iter().map(|(t, _)| *t).collect();
        assert_eq!(got_ids, ids(&round["draft_clean"]), "round {ri} (p = {p})");
        for (k, (_, logits)) in drafted.iter().enumerate() {
            let at = (ri * n + k) * vocab;
            let d = max_abs_diff(logits, &want[at..at + vocab]);
            assert!(
                d <= bound[k],
                "round {ri} (p = {p}) step {k}: logits differ by {d}"
            );
            worst[k] = worst[k].max(d);
            if round["matches_generate"].as_bool().unwrap() {
                worst_generate =
                    worst_generate.max(max_abs_diff(logits, &generated[at..at + vocab]));
            }
        }
        if round["matches_generate"].as_bool().unwrap() {
            assert_eq!(got_ids, ids(&round["draft_generate"]), "round {ri}");
            same_as_generate += 1;
        }
    }
    assert!(same_as_generate > 0);
    let worst: Vec<String> = worst.iter().map(|d| format!("{d:.1e}")).collect();
    println!(
        "{} rounds of {n} drafts: max |Δ| per step from float64 {worst:?}; {worst_generate:.1e} \
         from generate()'s float32 candidates over the {same_as_generate} rounds equal to it",
        rounds.len()
    );
}

/// A drafter whose sliding layer would read a key the target's cache no longer holds (no
/// extra row kept beyond the window) is an error naming the layers, not a wrong draft.
#[test]
fn gemma4_drafter_refuses_a_cache_without_its_window() {
    let target = load_target(&fixtures().join("gemma4-tiny-dense"));
    let drafter = Gemma4Drafter::load(&fixtures().join("gemma4-assistant-tiny"), &target).unwrap();
    let mut cache = target.new_cache(64);
    let toks: Vec<u32> = (10..30).collect();
    let h = target
        .forward_hidden(&mut [SeqBatch {
            tokens: &toks,
            cache: &mut cache,
            all_logits: false,
            media: None,
        }])
        .unwrap();
    cache.advance(toks.len());
    let dim = target.config().hidden_size;
    let err = drafter
        .step(&target, &mut cache, 40, &h[h.len() - dim..])
        .err()
        .expect("the ring holds only the window")
        .to_string();
    assert!(
        err.contains("drafter layer 0") && err.contains("layer 3"),
        "{err}"
    );
}

/// Loading the drafter folder as a model of its own says what it is.
#[test]
fn gemma4_drafter_is_not_a_model_of_its_own() {
    let err = oxinfer::Model::load(fixtures().join("gemma4-assistant-tiny"))
        .err()
        .expect("a drafter alone is refused")
        .to_string();
    assert!(err.contains("gemma4_assistant"), "{err}");
}

/// End to end with oxinfer's own caches: a greedy speculative loop (test code: the engine's
/// loop does not drive the drafter yet) drafts up to 4 tokens a round from the target's cache
/// and hidden state, verifies them in one pass of `1 + draft` rows, rolls the cache back past
/// the first rejection (`KvCache::truncate`, sliding rings keeping `draft + 2` extra rows) and
/// continues from the hidden state of the last accepted row. Its tokens are the plain greedy
/// ones, and it accepts exactly the drafts the same loop accepts in transformers (the script's
/// `clean_loop`).
#[test]
fn gemma4_drafter_greedy_loop_matches_plain_greedy() {
    let target = load_target(&fixtures().join("gemma4-tiny-dense"));
    let dir = fixtures().join("gemma4-assistant-tiny");
    let drafter = Gemma4Drafter::load(&dir, &target).unwrap();
    let r = reference(&dir);
    let (prompt, greedy) = (ids(&r["prompt"]), ids(&r["greedy_ids"]));
    let (max_draft, end) = (4, prompt.len() + greedy.len());
    let dim = target.config().hidden_size;
    let plan = target.plan();
    let argmax = |h: &[f32]| {
        let l = plan.head.forward(h, 1);
        (0..l.len()).fold(0, |b, i| if l[i] > l[b] { i } else { b }) as u32
    };
    let run = |cache: &mut oxinfer::nn::KvCache, tokens: &[u32]| {
        let h = target
            .forward_hidden(&mut [SeqBatch {
                tokens,
                cache: &mut *cache,
                all_logits: true,
                media: None,
            }])
            .unwrap();
        cache.advance(tokens.len());
        h
    };
    let mut cache = target.new_cache(64);
    cache.keep_rewind(max_draft + 2);
    let h = run(&mut cache, &prompt);
    let mut last = h[h.len() - dim..].to_vec();
    let mut out = vec![argmax(&last)];
    let (mut rounds, mut drafted, mut accepted) = (0, 0, 0);
    while prompt.len() + out.len() < end {
        let n = max_draft.min(end - prompt.len() - out.len());
        let token = *out.last().unwrap();
        let p = cache.len();
        let draft: Vec<u32> = drafter
            .draft(&target, &mut cache, token, &last, n)
            .unwrap()
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        let mut rows = vec![token];
        rows.extend(&draft);
        let h = run(&mut cache, &rows);
        let best: Vec<u32> = (0..rows.len())
            .map(|i| argmax(&h[i * dim..(i + 1) * dim]))
            .collect();
        let k = (0..n).take_while(|&i| draft[i] == best[i]).count();
        out.extend(&draft[..k]);
        out.push(best[k]);
        cache.truncate(p + 1 + k);
        last = h[k * dim..(k + 1) * dim].to_vec();
        rounds += 1;
        drafted += n;
        accepted += k;
    }
    out.truncate(greedy.len());
    assert_eq!(out, greedy);
    let clean = &r["clean_loop"];
    let want = |k: &str| clean[k].as_u64().unwrap() as usize;
    assert_eq!(
        (rounds, drafted, accepted),
        (want("rounds"), want("drafted"), want("accepted"))
    );
    println!("{accepted} of {drafted} drafts accepted in {rounds} rounds; tokens = plain greedy");
}

/// The engine's generation loop with the drafter attached as a draft head
/// (`BatchGenerator::with_draft_head`): `draft_max: 4` gives the plain greedy tokens, and
/// accepts the drafts the same loop accepts in transformers (`clean_loop`).
#[test]
fn gemma4_drafter_in_the_batch_generator_gives_plain_greedy() {
    use oxinfer::engine::batch::{BatchConfig, BatchGenerator, Finished, SeqRequest};
    use oxinfer::engine::speculative::draft_head::DraftHead;
    use oxinfer::engine::speculative::Speculation;
    use oxinfer::{GenerateOptions, SamplingParams};
    let target = load_target(&fixtures().join("gemma4-tiny-dense"));
    let dir = fixtures().join("gemma4-assistant-tiny");
    let drafter = Gemma4Drafter::load(&dir, &target).unwrap();
    let r = reference(&dir);
    let (prompt, greedy) = (ids(&r["prompt"]), ids(&r["greedy_ids"]));
    let run = |head: bool| -> Finished {
        let mut batch = BatchGenerator::new(&target, None, &BatchConfig::new(1, 128));
        if head {
            batch = batch.with_draft_head(DraftHead {
                drafter: &drafter,
                target: &target,
            });
        }
        let speculation = Speculation {
            draft_max: if head { 4 } else { 0 },
            ..Speculation::default()
        };
        let opts = GenerateOptions {
            max_tokens: greedy.len(),
            sampling: SamplingParams::greedy(),
            speculation,
            ..GenerateOptions::default()
        };
        let req = SeqRequest {
            prompt: prompt.clone(),
            opts,
        };
        batch.admit(req, 0).expect("admit");
        let mut done = [None];
        common::batch::run_all(&mut batch, &mut done);
        done[0].take().expect("finished")
    };
    assert_eq!(run(false).tokens, greedy, "plain");
    let f = run(true);
    assert_eq!(f.tokens, greedy, "with the draft head");
    let d = f.timings.draft;
    let clean = &r["clean_loop"];
    println!(
        "draft head in the batch loop: {} of {} drafts accepted",
        d.accepted, d.drafted
    );
    // The loop drafts at most `max_tokens - generated - 1` (a draft whose bonus token would
    // pass the limit is wasted), the script's loop up to the limit: fewer drafts near the end.
    let want = |k: &str| clean[k].as_u64().unwrap() as usize;
    assert_eq!(d.accepted, want("accepted"));
    assert!(d.drafted > 0 && d.drafted <= want("drafted"));
}
