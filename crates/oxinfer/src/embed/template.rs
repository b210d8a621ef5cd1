//! The special tokens an encoder's input carries around its text (`tokenizer.json`'s
//! `post_processor`: `TemplateProcessing`, `BertProcessing` or `RobertaProcessing`), with
//! truncation as transformers does it (`longest_first` for pairs).

use std::path::Path;

use serde_json::Value;

use crate::error::LoadError;
use crate::tokenizer::Tokenizer;

/// One element of a template: a special token or one of the two sequences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    /// A special token id with its token type.
    Special { id: u32, type_id: u32 },
    /// Sequence A (`first == true`) or B, with its token type.
    Seq { first: bool, type_id: u32 },
}

/// Token ids and token types of one encoder input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Encoded {
    /// Token ids, specials included.
    pub ids: Vec<u32>,
    /// Token type (segment) of each id.
    pub type_ids: Vec<u32>,
    /// How many of the first tokens hold a prompt put before the text (the special tokens
    /// before it included; sentence-transformers' `prompt_length`), for a model whose pooling
    /// leaves them out (`include_prompt: false`); 0 without a prompt or for other models.
    pub prompt_len: usize,
}

/// How an encoder's input is built from one text (`single`) or two (`pair`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputTemplate {
    single: Vec<Piece>,
    pair: Vec<Piece>,
}

impl InputTemplate {
    /// BERT's template, `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` (B with type 1).
    pub fn bert(cls: u32, sep: u32) -> Self {
        let sp = |id, type_id| Piece::Special { id, type_id };
        let seq = |first, type_id| Piece::Seq { first, type_id };
        InputTemplate {
            single: vec![sp(cls, 0), seq(true, 0), sp(sep, 0)],
            pair: vec![
                sp(cls, 0),
                seq(true, 0),
                sp(sep, 0),
                seq(false, 1),
                sp(sep, 1),
            ],
        }
    }

    /// The template of `tokenizer.json` (`json`, at `path`), ids resolved with `tok`. A missing
    /// post-processor means no special tokens.
    pub fn from_tokenizer_json(
        path: &Path,
        json: &Value,
        tok: &Tokenizer,
    ) -> Result<Self, LoadError> {
        let bad = |what: String| LoadError::field(path, format!("post_processor: {what}"));
        let id_of = |v: &Value| -> Result<u32, LoadError> {
            let text = match v {
                Value::String(s) => s.as_str(),
                Value::Array(a) => a.first().and_then(Value::as_str).unwrap_or_default(),
                _ => "",
            };
            tok.token_id(text)
                .ok_or_else(|| bad(format!("token {v} is not in the vocabulary")))
        };
        let pp = match json.get("post_processor") {
            None | Some(Value::Null) => {
                return Ok(InputTemplate {
                    single: vec![Piece::Seq {
                        first: true,
                        type_id: 0,
                    }],
                    pair: vec![
                        Piece::Seq {
                            first: true,
                            type_id: 0,
                        },
                        Piece::Seq {
                            first: false,
                            type_id: 1,
                        },
                    ],
                })
            }
            Some(pp) => pp,
        };
        match pp.get("type").and_then(Value::as_str) {
            Some("BertProcessing") => {
                let (cls, sep) = (id_of(&pp["cls"])?, id_of(&pp["sep"])?);
                Ok(Self::bert(cls, sep))
            }
            Some("RobertaProcessing") => {
                let (cls, sep) = (id_of(&pp["cls"])?, id_of(&pp["sep"])?);
                let sp = |id| Piece::Special { id, type_id: 0 };
                let seq = |first| Piece::Seq { first, type_id: 0 };
                Ok(InputTemplate {
                    single: vec![sp(cls), seq(true), sp(sep)],
                    pair: vec![sp(cls), seq(true), sp(sep), sp(sep), seq(false), sp(sep)],
                })
            }
            Some("TemplateProcessing") => {
                let list = |key: &str| -> Result<Vec<Piece>, LoadError> {
                    let items = pp[key]
                        .as_array()
                        .ok_or_else(|| bad(format!("'{key}' is not a list")))?;
                    items.iter().map(|item| template_piece(item, &id_of, &bad)).collect()
                };
                Ok(InputTemplate {
                    single: list("single")?,
                    pair: list("pair")?,
                })
            }
            other => Err(bad(format!(
                "type {other:?} is not supported (TemplateProcessing, BertProcessing, RobertaProcessing)"
            ))),
        }
    }

    /// Whether the input of one text ends with a special token (`[SEP]`, `</s>`, an EOS).
    pub fn ends_with_special(&self) -> bool {
        matches!(self.single.last(), Some(Piece::Special { .. }))
    }

    /// Number of special tokens added to one text (`pair == false`) or two.
    pub fn added_tokens(&self, pair: bool) -> usize {
        let pieces = if pair { &self.pair } else { &self.single };
        pieces
            .iter()
            .filter(|p| matches!(p, Piece::Special { .. }))
            .count()
    }

    /// The input of `a` (and `b`, for a pair), each cut so that the whole is at most
    /// `max_len` tokens (`None`: no limit): the longer of the two loses tokens first, as
    /// transformers' `longest_first`. Returns `None` when even the special tokens do not fit.
    pub fn apply(&self, a: &[u32], b: Option<&[u32]>, max_len: Option<usize>) -> Option<Encoded> {
        let pieces = if b.is_some() {
            &self.pair
        } else {
            &self.single
        };
        let (mut na, mut nb) = (a.len(), b.map_or(0, <[u32]>::len));
        if let Some(max) = max_len {
            let room = max.checked_sub(self.added_tokens(b.is_some()))?;
            (na, nb) = truncated_lengths(na, nb, room, b.is_some());
        }
        let mut out = Encoded::default();
        for p in pieces {
            match *p {
                Piece::Special { id, type_id } => {
                    out.ids.push(id);
                    out.type_ids.push(type_id);
                }
                Piece::Seq { first, type_id } => {
                    let s = if first {
                        &a[..na]
                    } else {
                        &b.unwrap_or_default()[..nb]
                    };
                    out.ids.extend_from_slice(s);
                    out.type_ids.extend(std::iter::repeat_n(type_id, s.len()));
                }
            }
        }
        Some(out)
    }
}

/// One item of a `TemplateProcessing` list: `{"SpecialToken": {id, type_id}}` or
/// `{"Sequence": {id: "A" | "B", type_id}}`.
fn template_piece(
    item: &Value,
    id_of: &dyn Fn(&Value) -> Result<u32, LoadError>,
    bad: &dyn Fn(String) -> LoadError,
) -> Result<Piece, LoadError> {
    let type_of = |v: &Value| v.get("type_id").and_then(Value::as_u64).unwrap_or(0) as u32;
    if let Some(s) = item.get("SpecialToken") {
        return Ok(Piece::Special {
            id: id_of(&s["id"])?,
            type_id: type_of(s),
        });
    }
    if let Some(s) = item.get("Sequence") {
        return Ok(Piece::Seq {
            first: s.get("id").and_then(Value::as_str) != Some("B"),
            type_id: type_of(s),
        });
    }
    Err(bad(format!("unknown template item {item}")))
}

/// Lengths of sequences of `na` and `nb` tokens cut to fit `room` together (transformers'
/// `longest_first`; only `na` when not a pair).
fn truncated_lengths(na: usize, nb: usize, room: usize, pair: bool) -> (usize, usize) {
    if !pair {
        return (na.min(room), 0);
    }
    if na + nb <= room {
        return (na, nb);
    }
    let (short, long) = (na.min(nb), na.max(nb));
    let (mut n1, mut n2) = if short > room {
        (short, short)
    } else {
        (short, (room - short).max(short))
    };
    if n1 + n2 > room {
        n1 = room / 2;
        n2 = n1 + room % 2;
    }
    let (n1, n2) = (n1.min(short), n2.min(long));
    if na > nb {
        (n2, n1)
    } else {
        (n1, n2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_first_matches_transformers() {
        // Cases from tests/fixtures/bert-tokenizer/refs.json ("truncated").
        assert_eq!(truncated_lengths(10, 4, 7, true), (4, 3));
        assert_eq!(truncated_lengths(2, 14, 5, true), (2, 3));
        assert_eq!(truncated_lengths(3, 3, 6, true), (3, 3));
        assert_eq!(truncated_lengths(30, 0, 14, false), (14, 0));
    }

    #[test]
    fn bert_template_and_types() {
        let t = InputTemplate::bert(101, 102);
        let e = t.apply(&[1, 2], Some(&[3]), None).unwrap();
        assert_eq!(e.ids, vec![101, 1, 2, 102, 3, 102]);
        assert_eq!(e.type_ids, vec![0, 0, 0, 0, 1, 1]);
        assert!(t.apply(&[1], None, Some(1)).is_none());
    }
}
