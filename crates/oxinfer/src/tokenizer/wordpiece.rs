//! WordPiece (BERT-style encoders) built on the `tokenizers` crate's parts, like [`super::bpe`]:
//! the BERT normalizer (clean text: control characters dropped and whitespace made a space;
//! spaces around CJK ideographs; accents stripped; lower-casing), the BERT pre-tokenizer (split
//! at whitespace, punctuation isolated), then greedy longest-match-first WordPiece with a
//! continuation prefix (`##`) and `[UNK]` for words longer than `max_input_chars_per_word` or
//! without a spelling in the vocabulary. Special tokens written in the text are split out before
//! (see [`super::special`]); `[CLS]`/`[SEP]` are added by the caller (the encoder's input
//! template), not here.

use serde_json::{json, Value};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::{Model, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};

use super::vocab::Vocab;

/// A WordPiece model with the BERT normalizer and pre-tokenizer. (The crate's types deserialize
/// only from text, hence the JSON values written out before parsing.)
pub(crate) struct WordPieceModel {
    normalizer: Option<BertNormalizer>,
    model: WordPiece,
}

impl std::fmt::Debug for WordPieceModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordPieceModel").finish_non_exhaustive()
    }
}

/// Whether a `tokenizer.json` describes a BERT-style WordPiece tokenizer that
/// [`WordPieceModel::from_tokenizer_json`] reproduces exactly: a `WordPiece` model, a
/// `BertNormalizer` (or none) and a `BertPreTokenizer`.
pub(crate) fn is_bert_wordpiece(json: &Value) -> bool {
    let ty = |key: &str| {
        json.get(key)
            .and_then(|v| v.get("type"))
            .and_then(Value::as_str)
    };
    let bert_normalizer = match json.get("normalizer") {
        None | Some(Value::Null) => true,
        Some(_) => ty("normalizer") == Some("BertNormalizer"),
    };
    ty("model") == Some("WordPiece")
        && bert_normalizer
        && ty("pre_tokenizer") == Some("BertPreTokenizer")
}

impl WordPieceModel {
    /// The model of a `tokenizer.json` for which [`is_bert_wordpiece`] holds.
    pub fn from_tokenizer_json(json: &Value) -> Result<Self, String> {
        let normalizer = match json.get("normalizer") {
            None | Some(Value::Null) => None,
            Some(n) => Some(
                serde_json::from_str::<BertNormalizer>(&n.to_string())
                    .map_err(|e| format!("normalizer: {e}"))?,
            ),
        };
        let model = json.get("model").ok_or("no 'model'")?;
        let model = serde_json::from_str::<WordPiece>(&model.to_string())
            .map_err(|e| format!("model: {e}"))?;
        Ok(WordPieceModel { normalizer, model })
    }

    /// A model over `vocab` (continuation pieces spelled with `prefix`), for vocabularies stored
    /// outside a `tokenizer.json`; BERT's default normalizer (lower-casing) when `lowercase`.
    pub fn from_vocab(
        vocab: &Vocab,
        unk: &str,
        prefix: &str,
        lowercase: bool,
    ) -> Result<Self, String> {
        let map: serde_json::Map<String, Value> = vocab
            .to_id
            .iter()
            .map(|(k, &v)| (k.clone(), json!(v)))
            .collect();
        let model = json!({
            "type": "WordPiece",
            "vocab": map,
            "unk_token": unk,
            "continuing_subword_prefix": prefix,
            "max_input_chars_per_word": 100,
        });
        let model =
            serde_json::from_str::<WordPiece>(&model.to_string()).map_err(|e| e.to_string())?;
        Ok(WordPieceModel {
            normalizer: Some(BertNormalizer::new(true, true, None, lowercase)),
            model,
        })
    }

    /// Appends the ids of `text` (a fragment without special tokens) to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<(), String> {
        if text.is_empty() {
            return Ok(());
        }
        let mut pts = PreTokenizedString::from(text);
        if let Some(n) = &self.normalizer {
            pts.normalize(|s| tokenizers::Normalizer::normalize(n, s))
                .map_err(|e| e.to_string())?;
        }
        BertPreTokenizer
            .pre_tokenize(&mut pts)
            .map_err(|e| e.to_string())?;
        pts.tokenize(|piece| self.model.tokenize(piece.get()))
            .map_err(|e| e.to_string())?;
        for (_, _, tokens) in pts.get_splits(OffsetReferential::Original, OffsetType::None) {
            if let Some(tokens) = tokens {
                out.extend(tokens.iter().map(|t| t.id));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::vocab::TokenKind;

    fn tiny() -> WordPieceModel {
        let texts: Vec<String> = [
            "[UNK]", "hello", "world", "un", "##aff", "##able", "!", "cafe",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let n = texts.len();
        let vocab = Vocab::new(texts, vec![TokenKind::Normal; n], vec![0.0; n]);
        WordPieceModel::from_vocab(&vocab, "[UNK]", "##", true).unwrap()
    }

    #[test]
    fn greedy_longest_match_with_continuations() {
        let mut out = Vec::new();
        tiny()
            .encode("Hello  WORLD! unaffable xyz Café", &mut out)
            .unwrap();
        assert_eq!(out, vec![1, 2, 6, 3, 4, 5, 0, 7]);
    }
}
