//! CLIP's BPE tokenizer exactly as transformers' `CLIPTokenizer` builds it from `vocab.json` and
//! `merges.txt` (NFC, whitespace runs to one space, lowercase; CLIP's word split; byte-level
//! BPE with `</w>` word ends), run by the `tokenizers` crate; then Stable Diffusion's framing:
//! `<|startoftext|>`, at most `max_length − 2` tokens, `<|endoftext|>`, padded to `max_length`
//! (77) with the pad token (`<|endoftext|>` in SD 1.x, `!` in SD 2.x).

use super::config::JsonConfig;
use super::DiffusionError;
use serde_json::{json, Value};
use std::path::Path;
use std::str::FromStr;

/// CLIP's word split (transformers' `CLIPTokenizer`).
const CLIP_SPLIT: &str =
    r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+";

/// A CLIP tokenizer with its special ids and sequence length.
pub struct ClipTokenizer {
    inner: tokenizers::Tokenizer,
    /// `<|startoftext|>`.
    pub bos: u32,
    /// `<|endoftext|>`.
    pub eos: u32,
    /// The id sequences are padded with.
    pub pad: u32,
    /// Tokens per sequence, specials included (77).
    pub max_length: usize,
}

/// The spellings of a tokenizer's special tokens.
struct Specials {
    bos: String,
    eos: String,
    pad: String,
    unk: String,
}

/// A special token's text from `tokenizer_config.json` / `special_tokens_map.json`: a string or
/// an object with `content`.
fn special(cfgs: &[&JsonConfig], key: &str, default: &str) -> String {
    for c in cfgs {
        match c.json.get(key) {
            Some(Value::String(s)) => return s.clone(),
            Some(Value::Object(o)) => {
                if let Some(Value::String(s)) = o.get("content") {
                    return s.clone();
                }
            }
            _ => {}
        }
    }
    default.to_string()
}

impl ClipTokenizer {
    /// Loads `vocab.json`, `merges.txt` and the special tokens of `tokenizer_config.json` /
    /// `special_tokens_map.json` (both optional) from the folder `dir`.
    ///
    /// # Errors
    /// A missing or malformed file, a special token absent from the vocabulary.
    pub fn load(dir: &Path) -> Result<Self, DiffusionError> {
        Self::load_with_pad(dir, None)
    }

    /// [`Self::load`] with the pad token `pad` instead of the folder's (a pipeline's variant:
    /// `<|endoftext|>` for SD 1.x, `!` for SD 2.x).
    ///
    /// # Errors
    /// As [`Self::load`].
    pub fn load_with_pad(dir: &Path, pad: Option<&str>) -> Result<Self, DiffusionError> {
        let read = |name: &str| -> Result<String, DiffusionError> {
            let p = dir.join(name);
            if !p.is_file() {
                return Err(DiffusionError::Missing {
                    path: p,
                    what: "tokenizer file".into(),
                });
            }
            std::fs::read_to_string(&p).map_err(|e| DiffusionError::config(&p, e.to_string()))
        };
        let vocab_text = read("vocab.json")?;
        let vocab: serde_json::Map<String, Value> =
            serde_json::from_str(&vocab_text).map_err(|e| {
                DiffusionError::config(dir.join("vocab.json"), format!("invalid JSON object: {e}"))
            })?;
        let merges: Vec<Value> = read("merges.txt")?
            .lines()
            .filter(|l| !l.starts_with("#version") && !l.trim().is_empty())
            .map(|l| {
                let mut parts = l.split(' ');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(a), Some(b), None) => Ok(json!([a, b])),
                    _ => Err(DiffusionError::config(
                        dir.join("merges.txt"),
                        format!("bad merge line '{l}'"),
                    )),
                }
            })
            .collect::<Result<_, _>>()?;
        let opt = |name: &str| -> Result<JsonConfig, DiffusionError> {
            let p = dir.join(name);
            if p.is_file() {
                JsonConfig::read(&p)
            } else {
                Ok(JsonConfig::from_value(&p, json!({})))
            }
        };
        let (tc, sm) = (
            opt("tokenizer_config.json")?,
            opt("special_tokens_map.json")?,
        );
        let cfgs = [&tc, &sm];
        let eos = special(&cfgs, "eos_token", "<|endoftext|>");
        let specials = Specials {
            bos: special(&cfgs, "bos_token", "<|startoftext|>"),
            pad: match pad {
                Some(p) => p.to_string(),
                None => special(&cfgs, "pad_token", &eos),
            },
            unk: special(&cfgs, "unk_token", &eos),
            eos,
        };
        let max_length = match tc.usize_or("model_max_length", 77)? {
            n if (3..=1024).contains(&n) => n,
            _ => 77,
        };
        Self::build(&dir.join("vocab.json"), vocab, merges, specials, max_length)
    }

    /// The built-in CLIP tokenizer ([`super::clip_vocab`]: the 49,408-token vocabulary of SD 1.x
    /// and SD 2.x, as `openai/clip-vit-large-patch14`'s and `stabilityai/stable-diffusion-2`'s
    /// tokenizer folders hold it), 77 tokens, padded with `pad` (`<|endoftext|>` for SD 1.x, `!`
    /// for SD 2.x).
    ///
    /// # Errors
    /// `pad` is not in the vocabulary.
    pub fn builtin(pad: &str) -> Result<Self, DiffusionError> {
        let v = super::clip_vocab::builtin().map_err(DiffusionError::Tokenizer)?;
        let specials = Specials {
            bos: "<|startoftext|>".into(),
            eos: "<|endoftext|>".into(),
            pad: pad.into(),
            unk: "<|endoftext|>".into(),
        };
        let origin = Path::new("built-in CLIP vocabulary");
        Self::build(origin, v.vocab.clone(), v.merges.clone(), specials, 77)
    }

    /// The tokenizer of `vocab` (`token → id`) and `merges` (`[a, b]` pairs by rank) with the
    /// special tokens `sp` and `max_length` tokens per sequence; `origin` names the vocabulary in
    /// errors.
    fn build(
        origin: &Path,
        vocab: serde_json::Map<String, Value>,
        merges: Vec<Value>,
        sp: Specials,
        max_length: usize,
    ) -> Result<Self, DiffusionError> {
        let id_of = |t: &str| -> Result<u32, DiffusionError> {
            vocab
                .get(t)
                .and_then(Value::as_u64)
                .map(|v| v as u32)
                .ok_or_else(|| {
                    DiffusionError::config(
                        origin,
                        format!("special token '{t}' is not in the vocabulary"),
                    )
                })
        };
        let (bos, eos, pad) = (id_of(&sp.bos)?, id_of(&sp.eos)?, id_of(&sp.pad)?);
        // transformers registers every special token as an added token, so a pad token that is
        // an ordinary character (SD 2.x's "!") is split out of the text as that token.
        let mut specials = vec![(&sp.bos, bos), (&sp.eos, eos), (&sp.pad, pad)];
        specials.dedup_by_key(|(t, _)| t.as_str());
        specials.sort_by_key(|&(_, id)| id);
        specials.dedup_by_key(|&mut (_, id)| id);
        let added: Vec<Value> = specials
            .iter()
            .map(|(t, id)| {
                json!({"id": id, "content": t, "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": true})
            })
            .collect();
        let unk_t = &sp.unk;
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFC"},
                {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
                {"type": "Lowercase"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": CLIP_SPLIT}, "behavior": "Removed", "invert": true},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]},
            "post_processor": null,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {"type": "BPE", "dropout": null, "unk_token": unk_t,
                      "continuing_subword_prefix": "", "end_of_word_suffix": "</w>",
                      "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                      "vocab": vocab, "merges": merges},
        });
        let inner = tokenizers::Tokenizer::from_str(&spec.to_string())
            .map_err(|e| DiffusionError::Tokenizer(format!("{}: {e}", origin.display())))?;
        Ok(ClipTokenizer {
            inner,
            bos,
            eos,
            pad,
            max_length,
        })
    }

    /// The token ids of `text` without framing (no start/end tokens, no padding).
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>, DiffusionError> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| DiffusionError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    /// `max_length` ids as the pipeline feeds the text encoder: start token, the text's tokens
    /// (cut to `max_length − 2`), end token, pad tokens.
    pub fn encode_padded(&self, text: &str) -> Result<Vec<u32>, DiffusionError> {
        let mut body = self.tokens(text)?;
        body.truncate(self.max_length - 2);
        let mut ids = Vec::with_capacity(self.max_length);
        ids.push(self.bos);
        ids.extend(body);
        ids.push(self.eos);
        ids.resize(self.max_length, self.pad);
        Ok(ids)
    }
}
