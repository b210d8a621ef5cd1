//! Building a tokenizer from a HuggingFace folder: `tokenizer.json` (loaded by the `tokenizers`
//! crate), `tokenizer_config.json` (BOS/EOS, `add_bos_token`, `chat_template`), and, beside them,
//! `chat_template.jinja` and `generation_config.json` (extra end-of-generation ids) when present.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::bytelevel;
use super::gguf::byte_token_value;
use super::spm::SPACE;
use super::vocab::{TokenKind, Vocab};
use super::wordpiece;
use super::{Backend, Specials, Tokenizer, TokenizerError};

fn read(path: &Path) -> Result<String, TokenizerError> {
    std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read_json(path: &Path) -> Result<Value, TokenizerError> {
    serde_json::from_str(&read(path)?).map_err(|e| TokenizerError::File {
        path: path.to_path_buf(),
        what: format!("not valid JSON: {e}"),
    })
}

/// A special-token field of `tokenizer_config.json`: a string or `{"content": ...}`.
fn token_field(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Every decoder in a (possibly nested) `decoder` value, flattened.
fn decoders(v: &Value, out: &mut Vec<Value>) {
    if let Some(list) = v.get("decoders").and_then(Value::as_array) {
        for d in list {
            decoders(d, out);
        }
    } else if v.is_object() {
        out.push(v.clone());
    }
}

/// How token strings turn into bytes, read from the `decoder` of tokenizer.json.
struct DecodeStyle {
    byte_level: bool,
    /// WordPiece: continuation pieces (`##ing`) join the previous one, other pieces start a word.
    wordpiece: bool,
    metaspace: bool,
    strip_leading_space: bool,
}

fn decode_style(tokenizer_json: &Value) -> DecodeStyle {
    let mut list = Vec::new();
    if let Some(d) = tokenizer_json.get("decoder") {
        decoders(d, &mut list);
    }
    let ty = |d: &Value| {
        d.get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let byte_level = list.iter().any(|d| ty(d) == "ByteLevel");
    let wordpiece = list.iter().any(|d| ty(d) == "WordPiece");
    let metaspace = list.iter().any(|d| {
        ty(d) == "Metaspace"
            || ty(d) == "ByteFallback"
            || (ty(d) == "Replace" && d.get("content").and_then(Value::as_str) == Some(" "))
    });
    let strip_leading_space = wordpiece
        || list.iter().any(|d| match ty(d).as_str() {
            "Strip" => {
                d.get("content").and_then(Value::as_str) == Some(" ")
                    && d.get("start").and_then(Value::as_u64).unwrap_or(0) > 0
            }
            "Metaspace" => match d.get("prepend_scheme").and_then(Value::as_str) {
                Some(scheme) => scheme != "never",
                None => d
                    .get("add_prefix_space")
                    .and_then(Value::as_bool)
                    .unwrap_or(true),
            },
            _ => false,
        });
    DecodeStyle {
        byte_level,
        wordpiece,
        metaspace,
        strip_leading_space,
    }
}

/// The BOS token of a `TemplateProcessing` post-processor whose single-sequence template starts
/// with a special token (Llama 3: `<|begin_of_text|> $A`).
fn post_processor_bos(tokenizer_json: &Value) -> Option<String> {
    let pp = tokenizer_json.get("post_processor")?;
    let mut stack = vec![pp];
    while let Some(p) = stack.pop() {
        if let Some(list) = p.get("processors").and_then(Value::as_array) {
            stack.extend(list.iter());
            continue;
        }
        if p.get("type").and_then(Value::as_str) != Some("TemplateProcessing") {
            continue;
        }
        let first = p.get("single")?.as_array()?.first()?;
        return first
            .get("SpecialToken")?
            .get("id")?
            .as_str()
            .map(str::to_string);
    }
    None
}

/// A `chat_template` field: a string, or a list of `{name, template}` (the "default" one).
fn template_field(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => {
            let named = |name: &str| {
                list.iter()
                    .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
            };
            named("default")
                .or_else(|| list.first())
                .and_then(|e| e.get("template"))
                .and_then(Value::as_str)
                .map(str::to_string)
        }
        _ => None,
    }
}

/// End-of-sequence ids in `generation_config.json` (an integer or a list).
fn generation_eos(path: &Path) -> Vec<u32> {
    let Ok(v) = read_json(path) else {
        return Vec::new();
    };
    match v.get("eos_token_id") {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|x| x as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// The tokenizer of a HF folder.
pub(crate) fn from_files(
    tokenizer_json: &Path,
    tokenizer_config_json: Option<&Path>,
) -> Result<Tokenizer, TokenizerError> {
    let json = read_json(tokenizer_json)?;
    let cannot_load = |e: tokenizers::Error| TokenizerError::File {
        path: tokenizer_json.to_path_buf(),
        what: format!("the tokenizers crate cannot load it: {e}"),
    };
    let mut hf = tokenizers::Tokenizer::from_file(tokenizer_json).map_err(cannot_load)?;
    // A `truncation` or `padding` block saved in tokenizer.json (common in XLM-R / BGE-M3
    // files) would cut or pad every encoding here; limits are applied by the callers, after
    // special tokens are placed, as transformers does.
    hf.with_truncation(None).map_err(cannot_load)?;
    hf.with_padding(None);
    let config = match tokenizer_config_json {
        Some(p) => Some(read_json(p)?),
        None => None,
    };
    let config_field = |k: &str| config.as_ref().and_then(|c| c.get(k));

    // Vocabulary: model tokens plus added tokens, indexed by id.
    let map = hf.get_vocab(true);
    let n = map.values().map(|&i| i as usize + 1).max().unwrap_or(0);
    // The table is indexed by id, so ids far past the number of tokens would size it by the
    // largest id alone (a 2^31 id: tens of GB). Real vocabularies are dense up to a few gaps.
    if n > 4 * map.len() + 65_536 {
        return Err(TokenizerError::File {
            path: tokenizer_json.to_path_buf(),
            what: format!(
                "token id {} for only {} tokens: the ids must number the vocabulary (at most \
                 a few gaps)",
                n - 1,
                map.len()
            ),
        });
    }
    let mut texts = vec![String::new(); n];
    for (t, &i) in &map {
        texts[i as usize] = t.clone();
    }
    let mut kinds = vec![TokenKind::Normal; n];
    for (id, added) in hf.get_added_tokens_decoder() {
        if let Some(k) = kinds.get_mut(id as usize) {
            *k = if added.special {
                TokenKind::Control
            } else {
                TokenKind::UserDefined
            };
        }
    }
    let style = decode_style(&json);
    for (i, t) in texts.iter().enumerate() {
        if kinds[i] == TokenKind::Normal && !style.byte_level && byte_token_value(t).is_some() {
            kinds[i] = TokenKind::Byte;
        }
    }
    let mut vocab = Vocab::new(texts, kinds, vec![0.0; n]);

    let id_of = |field: &str, vocab: &Vocab| -> Result<Option<(u32, String)>, TokenizerError> {
        let Some(text) = token_field(config_field(field)) else {
            return Ok(None);
        };
        match vocab.id(&text) {
            Some(id) => Ok(Some((id, text))),
            None => Err(TokenizerError::File {
                path: tokenizer_config_json
                    .map(Path::to_path_buf)
                    .unwrap_or_default(),
                what: format!(
                    "{field} '{text}' is not in the vocabulary of {}",
                    tokenizer_json.display()
                ),
            }),
        }
    };
    let post_bos = post_processor_bos(&json);
    let bos = match id_of("bos_token", &vocab)? {
        Some(b) => Some(b),
        None => post_bos
            .as_ref()
            .and_then(|t| vocab.id(t).map(|id| (id, t.clone()))),
    };
    let eos = id_of("eos_token", &vocab)?;
    let add_bos = match config_field("add_bos_token").and_then(Value::as_bool) {
        Some(b) => b,
        None => post_bos.is_some() && post_bos.as_deref() == bos.as_ref().map(|b| b.1.as_str()),
    };
    if add_bos && bos.is_none() {
        return Err(TokenizerError::NoBos {
            context: tokenizer_json.display().to_string(),
        });
    }

    let dirs: Vec<PathBuf> = [Some(tokenizer_json), tokenizer_config_json]
        .into_iter()
        .flatten()
        .filter_map(|p| p.parent().map(Path::to_path_buf))
        .collect();
    let mut declared = vec![eos.as_ref().map(|e| e.0)];
    if let Some(gen) = dirs
        .iter()
        .map(|d| d.join("generation_config.json"))
        .find(|p| p.is_file())
    {
        declared.extend(
            generation_eos(&gen)
                .into_iter()
                .filter(|&i| (i as usize) < n)
                .map(Some),
        );
    }
    let eos_ids = vocab.end_of_generation(&declared);

    for i in 0..n {
        let text = &vocab.texts[i];
        let bytes: Vec<u8> = match vocab.kinds[i] {
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown => {
                text.as_bytes().to_vec()
            }
            TokenKind::Byte => byte_token_value(text).map(|b| vec![b]).unwrap_or_default(),
            _ if style.byte_level => bytelevel::decode_token(text),
            _ if style.wordpiece => match text.strip_prefix("##") {
                Some(rest) => rest.as_bytes().to_vec(),
                None => format!(" {text}").into_bytes(),
            },
            _ if style.metaspace => text
                .chars()
                .map(|c| if c == SPACE { ' ' } else { c })
                .collect::<String>()
                .into_bytes(),
            _ => text.as_bytes().to_vec(),
        };
        vocab.bytes[i] = bytes.into_boxed_slice();
    }

    let mut chat_template = template_field(config_field("chat_template"));
    if chat_template.is_none() {
        if let Some(p) = dirs
            .iter()
            .map(|d| d.join("chat_template.jinja"))
            .find(|p| p.is_file())
        {
            chat_template = Some(read(&p)?);
        }
    }
    let (bos_id, bos_text) = bos.map_or((None, None), |(i, t)| (Some(i), Some(t)));
    let (eos_id, eos_text) = eos.map_or((None, None), |(i, t)| (Some(i), Some(t)));
    let backend = if wordpiece::is_bert_wordpiece(&json) {
        let model = wordpiece::WordPieceModel::from_tokenizer_json(&json).map_err(|what| {
            TokenizerError::File {
                path: tokenizer_json.to_path_buf(),
                what: format!("WordPiece tokenizer: {what}"),
            }
        })?;
        Backend::WordPiece(Box::new(model))
    } else {
        Backend::Hf(Box::new(hf))
    };
    Ok(Tokenizer::assemble(
        vocab,
        backend,
        Specials {
            bos: bos_id,
            eos: eos_id,
            eos_ids,
            add_bos,
            bos_text,
            eos_text,
        },
        style.strip_leading_space,
        chat_template,
        tokenizer_json.display().to_string(),
    ))
}
