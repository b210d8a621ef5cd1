//! The built-in CLIP vocabulary: the BPE of OpenAI's CLIP (`bpe_simple_vocab_16e6.txt`), which
//! SD 1.x's CLIP ViT-L/14 and SD 2.x's OpenCLIP ViT-H share, for single-file checkpoints (they
//! carry no tokenizer). `data/clip_bpe_merges.txt.gz` is the first 48,895 lines of the file
//! open_clip ships (a header line and the 48,894 merges the tokenizers use; MIT, see
//! `data/README.md`); the 49,408-token vocabulary is built from it as open_clip and OpenAI's CLIP
//! build it: the 256 byte symbols of GPT-2's byte-to-unicode map, the same with `</w>`, one token
//! per merge, then `<|startoftext|>` (49,406) and `<|endoftext|>` (49,407). It is decompressed
//! and built once, at first use.

use serde_json::{json, Map, Value};
use std::io::Read;
use std::sync::OnceLock;

/// The gzip of the merges (208 KB; 1.3 MB of text).
const MERGES_GZ: &[u8] = include_bytes!("data/clip_bpe_merges.txt.gz");
/// Merges the vocabulary is built from (49,152 − 256 − 2, as open_clip).
pub const MERGES: usize = 49152 - 256 - 2;
/// Tokens in the vocabulary.
pub const VOCAB_SIZE: usize = 49408;

/// The vocabulary (`token → id`) and the merges (`[a, b]` pairs, by rank), in the shapes the
/// `tokenizers` crate's BPE model takes.
pub struct ClipVocab {
    /// `token → id`, 49,408 entries.
    pub vocab: Map<String, Value>,
    /// The merges as `[a, b]` JSON pairs, first merge first.
    pub merges: Vec<Value>,
}

/// GPT-2's byte-to-unicode map as CLIP orders it: the printable bytes (`!`–`~`, `¡`–`¬`,
/// `®`–`ÿ`) as themselves, then every other byte, in byte order, as `U+0100 + n`.
fn byte_symbols() -> Vec<char> {
    let printable = |b: u32| {
        (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b)
    };
    let mut out: Vec<char> = (0..256u32)
        .filter(|&b| printable(b))
        .filter_map(char::from_u32)
        .collect();
    out.extend(
        (0..256u32)
            .filter(|&b| !printable(b))
            .enumerate()
            .filter_map(|(n, _)| char::from_u32(256 + n as u32)),
    );
    out
}

/// Builds the vocabulary from the embedded merges.
fn build() -> Result<ClipVocab, String> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(MERGES_GZ)
        .read_to_string(&mut text)
        .map_err(|e| format!("built-in CLIP merges: {e}"))?;
    let pairs: Vec<(&str, &str)> = text
        .split('\n')
        .skip(1)
        .take(MERGES)
        .map(|l| l.split_once(' ').filter(|(_, b)| !b.contains(' ')))
        .collect::<Option<_>>()
        .ok_or("built-in CLIP merges: a line is not one pair")?;
    if pairs.len() != MERGES {
        return Err(format!(
            "built-in CLIP merges: {} merges, expected {MERGES}",
            pairs.len()
        ));
    }
    let symbols = byte_symbols();
    let mut tokens: Vec<String> = symbols.iter().map(|c| c.to_string()).collect();
    tokens.extend(symbols.iter().map(|c| format!("{c}</w>")));
    tokens.extend(pairs.iter().map(|(a, b)| format!("{a}{b}")));
    tokens.push("<|startoftext|>".into());
    tokens.push("<|endoftext|>".into());
    let vocab: Map<String, Value> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, json!(i)))
        .collect();
    if vocab.len() != VOCAB_SIZE {
        return Err(format!(
            "built-in CLIP vocabulary: {} distinct tokens, expected {VOCAB_SIZE}",
            vocab.len()
        ));
    }
    let merges = pairs.iter().map(|(a, b)| json!([a, b])).collect();
    Ok(ClipVocab { vocab, merges })
}

/// The built-in vocabulary, built at the first call.
///
/// # Errors
/// The embedded data does not decompress or parse (a broken build, never user input).
pub fn builtin() -> Result<&'static ClipVocab, String> {
    static VOCAB: OnceLock<Result<ClipVocab, String>> = OnceLock::new();
    VOCAB.get_or_init(build).as_ref().map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_vocabulary_has_clips_layout() {
        let v = builtin().unwrap();
        let id = |t: &str| v.vocab[t].as_u64().unwrap();
        assert_eq!(v.vocab.len(), VOCAB_SIZE);
        assert_eq!(v.merges.len(), MERGES);
        // "!" is id 0 (SD 2.x's pad), the specials are the last two ids.
        assert_eq!((id("!"), id("!</w>")), (0, 256));
        assert_eq!((id("<|startoftext|>"), id("<|endoftext|>")), (49406, 49407));
        // The first merge and its token.
        assert_eq!(v.merges[0], json!(["i", "n"]));
        assert_eq!(id("in"), 512);
        // A non-printable byte's symbol: byte 0 is U+0100 (after the 188 printable bytes).
        assert_eq!(id("\u{100}"), 188);
    }
}
