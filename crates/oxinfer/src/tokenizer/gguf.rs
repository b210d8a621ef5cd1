//! Building a tokenizer from GGUF metadata (`tokenizer.ggml.*`), with llama.cpp's defaults.

use std::path::Path;

use crate::gguf::GgufFile;

use super::bpe::BpeModel;
use super::bytelevel;
use super::pretokenize::PreTokenizer;
use super::spm::{SpmModel, SPACE};
use super::vocab::{TokenKind, Vocab};
use super::wordpiece::WordPieceModel;
use super::{Backend, Tokenizer, TokenizerError};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";
const KEY_LOWERCASE: &str = "tokenizer.ggml.normalizer.lowercase";

fn missing(path: &Path, key: &str) -> TokenizerError {
    TokenizerError::MissingKey {
        path: path.to_path_buf(),
        key: key.to_string(),
    }
}

fn bad(path: &Path, key: &str, what: impl Into<String>) -> TokenizerError {
    TokenizerError::BadKey {
        path: path.to_path_buf(),
        key: key.to_string(),
        what: what.into(),
    }
}

/// The value of a `<0xXX>` byte token.
pub(crate) fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// An optional token id key, checked against the vocabulary size (out of range: ignored with a
/// warning, as llama.cpp does).
fn token_id(g: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    match g.get_u64(key)? {
        None => Ok(None),
        Some(id) if (id as usize) < n => Ok(Some(id as u32)),
        Some(id) => {
            eprintln!(
                "warning: {}: {key} = {id} is outside the vocabulary ({n} tokens); ignored",
                g.path().display()
            );
            Ok(None)
        }
    }
}

/// A `bert` GGUF token in transformers' WordPiece spelling: llama.cpp's converter writes
/// continuation pieces `##x` as `x` and every other non-control token `t` as `▁t`.
fn wordpiece_spelling(token: &str, kind: TokenKind) -> String {
    if kind == TokenKind::Control {
        return token.to_string();
    }
    match token.strip_prefix(SPACE) {
        Some(word) => word.to_string(),
        None => format!("##{token}"),
    }
}

/// The tokenizer stored in a GGUF file.
pub(crate) fn from_gguf(g: &GgufFile) -> Result<Tokenizer, TokenizerError> {
    let path = g.path();
    let model = g
        .get_str(KEY_MODEL)?
        .ok_or_else(|| missing(path, KEY_MODEL))?;
    // "gemma4": rank-ordered merges like "gpt2", but on raw UTF-8 with `▁` for spaces and
    // `<0xXX>` byte fallback (SentencePiece spelling), as llama.cpp's GEMMA4 pre-type does.
    let spm_style_bpe = model == "gemma4";
    // "bert": WordPiece, its vocabulary in llama.cpp's "phantom space" spelling.
    let wordpiece = model == "bert";
    let is_bpe = match model {
        "gpt2" | "gemma4" => true,
        "llama" | "bert" => false,
        other => {
            return Err(TokenizerError::UnsupportedModel {
                path: path.to_path_buf(),
                model: other.to_string(),
            })
        }
    };
    let tokens = g
        .get(KEY_TOKENS)
        .ok_or_else(|| missing(path, KEY_TOKENS))?
        .as_strings()
        .ok_or_else(|| bad(path, KEY_TOKENS, "expected an array of strings"))?;
    let n = tokens.len();
    if n == 0 {
        return Err(bad(path, KEY_TOKENS, "the vocabulary is empty"));
    }
    let kinds: Vec<TokenKind> = match g.get(KEY_TYPES) {
        None => vec![TokenKind::Normal; n],
        Some(v) => {
            let ints = v
                .as_array()
                .and_then(|a| a.to_ints())
                .ok_or_else(|| bad(path, KEY_TYPES, "expected an array of integers"))?;
            if ints.len() < n {
                return Err(bad(
                    path,
                    KEY_TYPES,
                    format!("{} entries for {n} tokens", ints.len()),
                ));
            }
            ints[..n].iter().map(|&t| TokenKind::from_gguf(t)).collect()
        }
    };
    let scores: Vec<f32> = match g.get(KEY_SCORES) {
        None => vec![0.0; n],
        Some(v) => {
            let s = v
                .as_array()
                .and_then(|a| a.to_f32s())
                .ok_or_else(|| bad(path, KEY_SCORES, "expected an array of numbers"))?;
            if s.len() < n {
                return Err(bad(
                    path,
                    KEY_SCORES,
                    format!("{} entries for {n} tokens", s.len()),
                ));
            }
            s[..n].to_vec()
        }
    };
    let texts: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else if wordpiece {
                wordpiece_spelling(t, kinds[i])
            } else {
                t.clone()
            }
        })
        .collect();
    let mut vocab = Vocab::new(texts, kinds, scores);

    // Special ids, with llama.cpp's SentencePiece defaults (BOS 1, EOS 2, UNK 0).
    let spm_default = |id: u32| (!is_bpe && !wordpiece && (id as usize) < n).then_some(id);
    let bos = token_id(g, "tokenizer.ggml.bos_token_id", n)?.or_else(|| spm_default(1));
    let eos = token_id(g, "tokenizer.ggml.eos_token_id", n)?.or_else(|| spm_default(2));
    let unk = token_id(g, "tokenizer.ggml.unknown_token_id", n)?.or_else(|| spm_default(0));
    let eot = token_id(g, "tokenizer.ggml.eot_token_id", n)?;
    let eom = token_id(g, "tokenizer.ggml.eom_token_id", n)?;

    let pre_name = g.get_str(KEY_PRE)?;
    let backend;
    let add_bos_family_default;
    if is_bpe {
        // A vocabulary without merges (every token one symbol) has no merges key: GGUF
        // writers do not store empty arrays (llama.cpp's gguf-py refuses them).
        let merges = match g.get(KEY_MERGES) {
            Some(v) => v
                .as_strings()
                .ok_or_else(|| bad(path, KEY_MERGES, "expected an array of strings"))?,
            None => &[],
        };
        let (family, unknown) = PreTokenizer::for_name(pre_name);
        if unknown && !spm_style_bpe {
            eprintln!(
                "warning: {}: unknown {KEY_PRE} '{}'; using the gpt-2 pre-tokenizer",
                path.display(),
                pre_name.unwrap_or_default()
            );
        }
        add_bos_family_default = family.add_bos_default;
        let model = if spm_style_bpe {
            BpeModel::new_spm_style(&vocab, merges)
        } else {
            BpeModel::new(&vocab, merges, &family)
        }
        .map_err(|message| TokenizerError::Backend {
            context: format!("{}: {KEY_TOKENS}/{KEY_MERGES}", path.display()),
            message,
        })?;
        backend = Backend::Bpe(Box::new(model));
    } else if wordpiece {
        add_bos_family_default = true;
        let lowercase = g.get_bool(KEY_LOWERCASE)?.unwrap_or(true);
        let unk_text = unk.map_or("[UNK]", |u| vocab.texts[u as usize].as_str());
        let model =
            WordPieceModel::from_vocab(&vocab, unk_text, "##", lowercase).map_err(|message| {
                TokenizerError::Backend {
                    context: format!("{}: {KEY_TOKENS}", path.display()),
                    message,
                }
            })?;
        backend = Backend::WordPiece(Box::new(model));
    } else {
        add_bos_family_default = true;
        let add_space_prefix = g.get_bool(KEY_ADD_SPACE_PREFIX)?.unwrap_or(true);
        backend = Backend::Spm(SpmModel::new(&vocab, add_space_prefix, unk));
    }
    // llama.cpp forces add_bos on for Gemma 4 vocabularies whatever the metadata says.
    let add_bos = spm_style_bpe || g.get_bool(KEY_ADD_BOS)?.unwrap_or(add_bos_family_default);
    if add_bos && bos.is_none() {
        return Err(bad(
            path,
            KEY_ADD_BOS,
            "is true but tokenizer.ggml.bos_token_id is not set",
        ));
    }

    // End-of-generation set; this also re-marks some tokens as control, which changes how they
    // are matched in text and decoded, so the pieces are computed afterwards.
    let eos_ids = vocab.end_of_generation(&[eos, eot, eom]);
    for i in 0..n {
        let text = &vocab.texts[i];
        let bytes: Vec<u8> = match vocab.kinds[i] {
            TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
                text.as_bytes().to_vec()
            }
            TokenKind::Normal if is_bpe && !spm_style_bpe => bytelevel::decode_token(text),
            TokenKind::Normal if wordpiece => match text.strip_prefix("##") {
                Some(rest) => rest.as_bytes().to_vec(),
                None => format!(" {text}").into_bytes(),
            },
            TokenKind::Normal => text
                .chars()
                .map(|c| if c == SPACE { ' ' } else { c })
                .collect::<String>()
                .into_bytes(),
            TokenKind::Byte => byte_token_value(text).map(|b| vec![b]).unwrap_or_default(),
            TokenKind::Unused | TokenKind::Undefined => Vec::new(),
        };
        vocab.bytes[i] = bytes.into_boxed_slice();
    }

    let strip_leading_space = match &backend {
        Backend::Spm(m) => m.add_space_prefix,
        _ => false,
    };
    let chat_template = g.get_str(KEY_CHAT_TEMPLATE)?.map(str::to_string);
    Ok(Tokenizer::assemble(
        vocab,
        backend,
        super::Specials {
            bos,
            eos,
            eos_ids,
            add_bos,
            bos_text: None,
            eos_text: None,
        },
        strip_leading_space,
        chat_template,
        path.display().to_string(),
    ))
}
