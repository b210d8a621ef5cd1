//! The checks the multimodal fixtures share (tiny Gemma 4, tiny Qwen 3.5 vision): media files
//! encoded by a model's towers, and a mixed prompt's placement, logits and greedy tokens
//! against the fixture's transformers references.

use oxinfer::arch::multimodal::MediaKind;
use oxinfer::engine::media::{encode_media, expand_markers, fill_runs, EncodedMedia};
use oxinfer::media::Limits;
use oxinfer::plan::media::MediaEmbeds;
use oxinfer::plan::RowPositions;
use oxinfer::{GenerateOptions, Model, SamplingParams};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Encodes each `(name, file)` as an input of `kind` with the model's towers.
pub fn encode_files(
    model: &Model,
    kind: MediaKind,
    files: &[(&str, PathBuf)],
) -> Vec<EncodedMedia> {
    let towers = model.lm().media().expect("media towers loaded");
    files
        .iter()
        .map(|(name, path)| {
            let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            encode_media(towers, kind, &bytes, name, &Limits::default(), None)
                .unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect()
}

/// The error of encoding `bytes` (named `name`) as an input of `kind` with the model's towers.
///
/// # Panics
/// If the input encodes.
pub fn encode_error(model: &Model, kind: MediaKind, bytes: &[u8], name: &str) -> String {
    let towers = model.lm().media().expect("media towers loaded");
    encode_media(towers, kind, bytes, name, &Limits::default(), None)
        .err()
        .unwrap_or_else(|| panic!("{name} encoded"))
        .to_string()
}

/// Checks the mixed prompt of reference `r` (in `dir`): `r["chat_template_text"]` tokenized
/// with its markers expanded for `inputs` gives `r["prompt_ids"]`, and placing the inputs on
/// those ids directly (what `--tokens` does) gives the same media; then, for each prefill
/// chunk, the prompt's logits match `dir/logits_file` within `tol` and 32 greedy tokens equal
/// `r["greedy_ids"]`. Returns the largest logit difference.
pub fn check_mixed_prompt(
    model: &Model,
    dir: &Path,
    r: &Value,
    logits_file: &str,
    inputs: &[EncodedMedia],
    chunks: &[usize],
    tol: f32,
) -> f32 {
    let towers = model.lm().media().expect("media towers loaded");
    let dim = model.config().hidden_size;
    let text = r["chat_template_text"]
        .as_str()
        .expect("chat_template_text");
    let marked = model.tokenize(text, false).unwrap();
    let (expanded, from_markers) =
        expand_markers(&marked, towers, inputs, dim, model.tokenizer()).unwrap();
    let prompt = super::ids(&r["prompt_ids"]);
    assert_eq!(expanded, prompt, "template markers expanded");
    let media = fill_runs(&prompt, towers, inputs, dim).unwrap();
    assert_eq!(from_markers, media, "placement from markers and from ids");
    let (_, want) = super::read_npy_f32(&dir.join(logits_file));
    let media = Arc::new(media);
    let mut worst = 0f32;
    for &chunk in chunks {
        let opts = GenerateOptions {
            max_tokens: 32,
            sampling: SamplingParams::greedy(),
            ignore_eos: true,
            keep_prompt_logits: true,
            prefill_chunk: chunk,
            media: Some(media.clone()),
            ..GenerateOptions::default()
        };
        let g = model
            .session(Some(512))
            .generate(&prompt, &opts, |_| true)
            .unwrap();
        let d = super::max_abs_diff(g.prompt_logits.as_ref().unwrap(), &want);
        println!("prefill chunk {chunk}: logits max diff {d:e}");
        assert!(d <= tol, "chunk {chunk}: logits differ by {d}");
        assert_eq!(g.tokens, super::ids(&r["greedy_ids"]), "chunk {chunk}");
        worst = worst.max(d);
    }
    worst
}

/// Checks the M-RoPE positions of `prompt` (its markers expanded into `media`) against
/// transformers' `get_rope_index` in reference `r` (`r["mrope_positions"]`: the three axes of
/// every row), reading the rows whole and from the later chunk start `chunk_start`, and that a
/// decode step after the prompt continues at the sequence index plus `r["mrope_delta"]`.
pub fn check_mrope_positions(prompt: &[u32], media: &MediaEmbeds, r: &Value, chunk_start: usize) {
    let want = r["mrope_positions"].as_array().expect("mrope_positions");
    let axis = |a: usize| super::ids(&want[a]);
    let (t, h, w) = (axis(0), axis(1), axis(2));
    for pos0 in [0, chunk_start] {
        let pos = RowPositions {
            pos0,
            media: Some(media),
        };
        for i in 0..prompt.len() - pos0 {
            let p = pos0 + i;
            let got = pos.axes(i).map(|v| v as u32);
            assert_eq!(got, [t[p], h[p], w[p]], "position {p}");
        }
    }
    let n = prompt.len();
    let delta = r["mrope_delta"].as_i64().expect("mrope_delta");
    let next = RowPositions {
        pos0: n,
        media: Some(media),
    };
    assert_eq!(next.axes(0)[0] as i64, n as i64 + delta);
}
