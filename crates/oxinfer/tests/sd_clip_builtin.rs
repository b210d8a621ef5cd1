//! The built-in CLIP tokenizer (single-file checkpoints without `--tokenizer`) against
//! transformers' `CLIPTokenizer` built from the same vocabulary and merges and against
//! `open_clip.tokenize` (`tools/ref/make_clip_tokenizer_refs.py`,
//! `tests/fixtures/clip_tokenizer/builtin_ids.json`): 34 strings (punctuation, numbers, case,
//! whitespace, accents, combining marks, CJK, Cyrillic, Arabic, emoji, special tokens in text,
//! truncation at 77, the empty string), 77 ids each, padded as SD 1.x (`<|endoftext|>`) and
//! SD 2.x (`!`, id 0).

mod common;

use common::{fixture_json, ids};
use oxinfer::arch::diffusion::ldm_config::Family;
use oxinfer::arch::diffusion::ClipTokenizer;

#[test]
fn builtin_tokenizer_matches_transformers_and_open_clip() {
    let r = fixture_json("clip_tokenizer/builtin_ids.json");
    let sd1 = ClipTokenizer::builtin(Family::Sd1.pad_token()).unwrap();
    let sd2 = ClipTokenizer::builtin(Family::Sd2.pad_token()).unwrap();
    assert_eq!(
        (sd1.bos, sd1.eos, sd1.pad, sd2.pad),
        (49406, 49407, 49407, 0)
    );
    let cases = r["cases"].as_array().unwrap();
    assert!(cases.len() >= 30);
    let mut open_clip = 0;
    for c in cases {
        let text = c["text"].as_str().unwrap();
        assert_eq!(
            sd1.encode_padded(text).unwrap(),
            ids(&c["sd1"]),
            "SD 1.x: {text:?}"
        );
        let got = sd2.encode_padded(text).unwrap();
        assert_eq!(got, ids(&c["sd2"]), "SD 2.x: {text:?}");
        if c["open_clip_agrees"].as_bool().unwrap() {
            assert_eq!(got, ids(&c["open_clip"]), "open_clip: {text:?}");
            open_clip += 1;
        }
    }
    eprintln!(
        "built-in tokenizer: {} strings identical to transformers (both paddings), {open_clip} also to open_clip",
        cases.len()
    );
}
