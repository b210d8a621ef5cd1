//! The tiny multimodal Gemma 4 checkpoint with `use_bidirectional_attention: "vision"` against
//! transformers 5 float32 (fixture made by tools/ref/make_tiny_gemma4_bidir.py): in the sliding
//! layers (window 8) the soft tokens of each of the prompt's two images (64 and 63 of them) also
//! see the later tokens of their image; full layers and decode steps stay causal. The prompt's
//! logits (whole, and in chunks that would cut an image, which then runs whole) and 32 greedy
//! tokens; two sequences in one batch under a prefill budget smaller than an image; a prompt
//! ending inside an image run again from the cache; a pass that cuts an image refused.

mod common;

use common::{
    check_mixed_prompt, encode_files, fixtures, ids, max_abs_diff, read_npy_f32, run_all, step_once,
};
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::arch::SeqBatch;
use oxinfer::engine::batch::{BatchConfig, BatchGenerator, Finished, PrefillBudget};
use oxinfer::engine::media::{fill_runs, EncodedMedia};
use oxinfer::engine::{GenerateOptions, SamplingParams, SeqRequest};
use oxinfer::plan::media::MediaEmbeds;
use oxinfer::Model;
use std::path::PathBuf;
use std::sync::Arc;

fn dir() -> PathBuf {
    fixtures().join("tiny_gemma4_bidir")
}

fn encoded(model: &Model) -> Vec<EncodedMedia> {
    let images = [
        ("scene", dir().join("scene.png")),
        ("logo", dir().join("logo.png")),
    ];
    encode_files(model, MediaKind::Image, &images)
}

/// The reference prompt's ids and its images placed on them.
fn prompt(model: &Model) -> (Vec<u32>, Arc<MediaEmbeds>) {
    let r = common::reference(&dir());
    let prompt = ids(&r["prompt_ids"]);
    let towers = model.lm().media().expect("media towers");
    let media = fill_runs(&prompt, towers, &encoded(model), model.config().hidden_size).unwrap();
    (prompt, Arc::new(media))
}

fn greedy(media: &Arc<MediaEmbeds>) -> GenerateOptions {
    GenerateOptions {
        max_tokens: 32,
        sampling: SamplingParams::greedy(),
        ignore_eos: true,
        keep_prompt_logits: true,
        media: Some(media.clone()),
        ..GenerateOptions::default()
    }
}

#[test]
fn the_fixture_has_two_images_longer_than_the_window() {
    let model = Model::load(dir()).unwrap();
    let (_, media) = prompt(&model);
    let groups = media.groups();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let window = model.config().sliding_window.expect("sliding layers");
    assert!(groups.iter().all(|g| g.len() > window), "{groups:?}");
    let r = common::reference(&dir());
    let causal = r["causal_logits_max_diff"].as_f64().unwrap();
    assert!(causal > 0.05, "the causal logits differ by {causal} only");
}

#[test]
fn mixed_prompt_logits_and_greedy_match() {
    let model = Model::load(dir()).unwrap();
    let inputs = encoded(&model);
    let r = common::reference(&dir());
    // Chunks of 50, 7 and 1 would end inside the images (positions 13..77 and 84..147).
    let worst = check_mixed_prompt(
        &model,
        &dir(),
        &r,
        "logits.npy",
        &inputs,
        &[usize::MAX, 50, 7, 1],
        1e-4,
    );
    println!("worst logits max diff {worst:e}");
}

#[test]
fn batched_sequences_under_a_small_prefill_budget_match() {
    let model = Model::load(dir()).unwrap();
    let (prompt, media) = prompt(&model);
    let r = common::reference(&dir());
    let (_, want) = read_npy_f32(&dir().join("logits.npy"));
    let cfg = BatchConfig {
        prefill: PrefillBudget {
            shared: 10,
            alone: 30,
        },
        ..BatchConfig::new(2, 512)
    };
    let mut batch = BatchGenerator::new(model.lm(), None, &cfg);
    let req = SeqRequest {
        prompt: prompt.clone(),
        opts: greedy(&media),
    };
    let mut done: Vec<Option<Finished>> = vec![None, None];
    batch.admit(req.clone(), 0).expect("admit 0");
    // The second joins while the first is in its first image, then prefills beside it.
    step_once(&mut batch, &mut done);
    batch.admit(req, 1).expect("admit 1");
    run_all(&mut batch, &mut done);
    for (i, f) in done.iter().enumerate() {
        let f = f.as_ref().expect("finished");
        let d = max_abs_diff(f.prompt_logits.as_ref().unwrap(), &want);
        println!("sequence {i}: logits max diff {d:e}");
        assert!(d <= 1e-4, "sequence {i}: logits differ by {d}");
        assert_eq!(f.tokens, ids(&r["greedy_ids"]), "sequence {i}");
    }
}

#[test]
fn a_prompt_ending_inside_an_image_reruns_the_image_from_the_cache() {
    let model = Model::load(dir()).unwrap();
    let (full, media) = prompt(&model);
    let (_, want) = read_npy_f32(&dir().join("logits.npy"));
    let vocab = model.config().vocab_size;
    // The prompt up to the end of the second image: its rows are the full prompt's (nothing
    // after an image is seen by it).
    let second = media.groups()[1].clone();
    let short = &full[..second.end];
    let mut s = model.session(Some(512));
    let opts = GenerateOptions {
        max_tokens: 1,
        ..greedy(&media)
    };
    let first = s.generate(short, &opts, |_| true).unwrap();
    let d = max_abs_diff(
        first.prompt_logits.as_ref().unwrap(),
        &want[..second.end * vocab],
    );
    assert!(d <= 1e-4, "first run: logits differ by {d}");
    // Again: the cache holds the whole prompt, but its last token must run and it lies in the
    // image, so the image runs again, whole (here the sliding layers' rings, narrowed to their
    // window, cannot rewind that far: the whole prompt runs again).
    let again = s.generate(short, &opts, |_| true).unwrap();
    let from = short.len() - again.timings.prompt_tokens;
    assert!(
        from <= second.start,
        "the rerun starts at {from}, inside {second:?}"
    );
    let d = max_abs_diff(
        again.prompt_logits.as_ref().unwrap(),
        &want[from * vocab..second.end * vocab],
    );
    println!("rerun from position {from}: logits max diff {d:e}");
    assert!(d <= 1e-4, "rerun: logits differ by {d}");
    assert_eq!(again.tokens, first.tokens);
}

#[test]
fn a_pass_that_cuts_an_image_is_refused() {
    let model = Model::load(dir()).unwrap();
    let (prompt, media) = prompt(&model);
    let g = media.groups()[0].clone();
    let mut cache = model.lm().new_cache(512);
    let mut batch = [SeqBatch {
        tokens: &prompt[..g.start + 5],
        cache: &mut cache,
        all_logits: false,
        media: Some(media.clone()),
    }];
    let e = model
        .lm()
        .forward_batch(&mut batch)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "positions 0..{} cuts the media group at positions {}..{}",
            g.start + 5,
            g.start,
            g.end
        )),
        "{e}"
    );
}
