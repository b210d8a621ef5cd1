//! Tokenizers: text to token ids and back, for GGUF vocabularies and HuggingFace folders.
//!
//! One type, [`Tokenizer`], serves every model:
//! * GGUF `tokenizer.ggml.model = "gpt2"`: byte-level BPE on the `tokenizers` crate, with the
//!   pre-tokenizer expressions llama.cpp uses for `tokenizer.ggml.pre`;
//! * GGUF `tokenizer.ggml.model = "llama"`: SentencePiece-style BPE written after llama.cpp's SPM
//!   tokenizer (score-ordered merges, `▁` for spaces, byte fallback);
//! * `tokenizer.json` (+ `tokenizer_config.json`): the `tokenizers` crate as is.
//!
//! Special tokens written in the text (`<|im_start|>`, `<start_of_turn>`, ...) are always parsed
//! as special tokens, as llama.cpp does for chat prompts (`parse_special = true`). For GGUF files
//! the ids match llama.cpp's `llama_tokenize(..., add_special=false, parse_special=true)`.

#![warn(missing_docs)]

mod bpe;
mod bytelevel;
mod error;
mod gguf;
mod hf;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod vocab;
mod wordpiece;

use std::path::Path;

pub use error::TokenizerError;
pub use stream::StreamDecoder;
pub use vocab::TokenKind;

use crate::gguf::GgufFile;
use special::{Fragment, SpecialMatcher};
use vocab::Vocab;

/// The model that turns text fragments into ids.
enum Backend {
    Bpe(Box<bpe::BpeModel>),
    Spm(spm::SpmModel),
    Hf(Box<tokenizers::Tokenizer>),
    WordPiece(Box<wordpiece::WordPieceModel>),
}

/// BOS/EOS facts gathered by a loader.
struct Specials {
    bos: Option<u32>,
    eos: Option<u32>,
    eos_ids: Vec<u32>,
    add_bos: bool,
    bos_text: Option<String>,
    eos_text: Option<String>,
}

/// A tokenizer: encodes text to token ids and decodes ids to text.
pub struct Tokenizer {
    vocab: Vocab,
    backend: Backend,
    specials: SpecialMatcher,
    bos: Option<u32>,
    eos: Option<u32>,
    eos_ids: Vec<u32>,
    add_bos: bool,
    bos_text: Option<String>,
    eos_text: Option<String>,
    strip_leading_space: bool,
    chat_template: Option<String>,
    source: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.backend {
            Backend::Bpe(_) => "byte-level BPE",
            Backend::Spm(_) => "SentencePiece",
            Backend::Hf(_) => "tokenizer.json",
            Backend::WordPiece(_) => "WordPiece",
        };
        f.debug_struct("Tokenizer")
            .field("source", &self.source)
            .field("kind", &kind)
            .field("vocab_size", &self.vocab.len())
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .field("add_bos", &self.add_bos)
            .finish()
    }
}

impl Tokenizer {
    /// The tokenizer stored in a GGUF file's `tokenizer.ggml.*` metadata (and its
    /// `tokenizer.chat_template`).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        gguf::from_gguf(gguf)
    }

    /// The tokenizer of a HuggingFace folder: `tokenizer.json`, plus `tokenizer_config.json` for
    /// BOS/EOS tokens, `add_bos_token` and the chat template. A `chat_template.jinja` and a
    /// `generation_config.json` next to these files are read too when present.
    pub fn from_files(
        tokenizer_json: &Path,
        tokenizer_config_json: Option<&Path>,
    ) -> Result<Tokenizer, TokenizerError> {
        hf::from_files(tokenizer_json, tokenizer_config_json)
    }

    fn assemble(
        vocab: Vocab,
        backend: Backend,
        s: Specials,
        strip_leading_space: bool,
        chat_template: Option<String>,
        source: String,
    ) -> Tokenizer {
        let specials = match backend {
            // tokenizer.json's added tokens are split out by the tokenizers crate itself.
            Backend::Hf(_) => SpecialMatcher::default(),
            _ => SpecialMatcher::new(&vocab),
        };
        let text_of = |id: Option<u32>| id.and_then(|i| vocab.texts.get(i as usize).cloned());
        let bos_text = s.bos_text.or_else(|| text_of(s.bos));
        let eos_text = s.eos_text.or_else(|| text_of(s.eos));
        Tokenizer {
            vocab,
            backend,
            specials,
            bos: s.bos,
            eos: s.eos,
            eos_ids: s.eos_ids,
            add_bos: s.add_bos,
            bos_text,
            eos_text,
            strip_leading_space,
            chat_template,
            source,
        }
    }

    /// Token ids of `text`, with the BOS token first when `add_bos` (an error when the vocabulary
    /// has none). Special-token strings in the text become their ids. No EOS is appended.
    pub fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_bos {
            out.push(self.bos.ok_or_else(|| TokenizerError::NoBos {
                context: self.source.clone(),
            })?);
        }
        let backend_err = |message: String| TokenizerError::Backend {
            context: self.source.clone(),
            message,
        };
        match &self.backend {
            Backend::Hf(hf) => {
                let enc = hf
                    .encode(text, false)
                    .map_err(|e| backend_err(e.to_string()))?;
                out.extend_from_slice(enc.get_ids());
            }
            Backend::Bpe(model) => self
                .encode_around_specials(text, &mut out, |t, o| model.encode(t, o))
                .map_err(backend_err)?,
            Backend::WordPiece(model) => self
                .encode_around_specials(text, &mut out, |t, o| model.encode(t, o))
                .map_err(backend_err)?,
            Backend::Spm(model) => {
                // llama.cpp treats the start of the input like a preceding special token.
                let mut after_special = true;
                for frag in self.specials.partition(text) {
                    match frag {
                        Fragment::Text(r) => {
                            model.encode_fragment(&self.vocab, &text[r], after_special, &mut out);
                            after_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(id);
                            after_special = true;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Splits `text` at special-token strings (their ids go to `out` as is) and encodes the text
    /// between them with `encode_text`.
    fn encode_around_specials(
        &self,
        text: &str,
        out: &mut Vec<u32>,
        encode_text: impl Fn(&str, &mut Vec<u32>) -> Result<(), String>,
    ) -> Result<(), String> {
        for frag in self.specials.partition(text) {
            match frag {
                Fragment::Text(r) => encode_text(&text[r], out)?,
                Fragment::Token(id) => out.push(id),
            }
        }
        Ok(())
    }

    /// The bytes of `ids` decoded: every token's bytes (special tokens as their text), with the
    /// space a SentencePiece prefix added removed from the first token. Ids outside the
    /// vocabulary contribute nothing.
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for (i, &id) in ids.iter().enumerate() {
            let b = self.token_bytes(id).unwrap_or_default();
            out.extend_from_slice(if i == 0 { self.strip_first(b) } else { b });
        }
        out
    }

    /// The text of `ids` ([`decode_bytes`](Self::decode_bytes), invalid UTF-8 replaced by
    /// U+FFFD). Nothing is skipped: special tokens appear as their text.
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids)).into_owned()
    }

    /// A decoder for ids generated after a prompt: each token's piece as is.
    pub fn stream(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, false)
    }

    /// A decoder for ids that start a text: its output concatenates to [`decode`](Self::decode).
    pub fn stream_from_start(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self, true)
    }

    /// The leading space SentencePiece prefixing adds, removed from a first token's bytes.
    fn strip_first<'b>(&self, bytes: &'b [u8]) -> &'b [u8] {
        if self.strip_leading_space {
            bytes.strip_prefix(b" ").unwrap_or(bytes)
        } else {
            bytes
        }
    }

    /// The vocabulary entry of `id` as stored (`Ġworld`, `▁world`, `<0x0A>`, `<|im_end|>`).
    pub fn token_piece(&self, id: u32) -> Option<&str> {
        self.vocab.texts.get(id as usize).map(String::as_str)
    }

    /// The bytes `id` contributes to decoded text (a byte-level piece decoded, `▁` as a space,
    /// `<0xXX>` as its byte, special tokens as their text; empty for unused slots).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.vocab.bytes.get(id as usize).map(|b| &b[..])
    }

    /// The id of a vocabulary entry given as stored (see [`token_piece`](Self::token_piece)).
    pub fn token_id(&self, piece: &str) -> Option<u32> {
        self.vocab.id(piece)
    }

    /// The kind of a token, `None` when `id` is outside the vocabulary.
    pub fn token_kind(&self, id: u32) -> Option<TokenKind> {
        self.vocab.kind(id)
    }

    /// Number of token ids (the embedding table's rows may be more).
    pub fn vocab_size(&self) -> usize {
        self.vocab.len()
    }

    /// The BOS token id.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS token id the metadata declares.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Every id that ends generation, sorted: EOS, EOT and EOM, plus the tokens llama.cpp treats
    /// as end of generation by their text (`<|im_end|>`, `<|eot_id|>`, `<end_of_turn>`,
    /// `<|endoftext|>`, fill-in-the-middle pad/repo/file-separator tokens, ...) and, for HF
    /// folders, the `eos_token_id` of `generation_config.json`.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// Whether `id` ends generation (is in [`eos_ids`](Self::eos_ids)).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eos_ids.binary_search(&id).is_ok()
    }

    /// Whether the model's metadata asks for a BOS token at the start of a prompt
    /// (`tokenizer.ggml.add_bos_token`, `add_bos_token`, or the family's default).
    pub fn add_bos_default(&self) -> bool {
        self.add_bos
    }

    /// The BOS token's text, for chat templates.
    pub fn bos_token(&self) -> Option<&str> {
        self.bos_text.as_deref()
    }

    /// The EOS token's text, for chat templates.
    pub fn eos_token(&self) -> Option<&str> {
        self.eos_text.as_deref()
    }

    /// The model's chat template (Jinja source), if it ships one.
    pub fn chat_template(&self) -> Option<&str> {
        self.chat_template.as_deref()
    }

    /// Whether `id` is a control or unknown token (what `skip_special_tokens` would drop).
    /// User-defined tokens such as Gemma's whitespace runs are text, not special.
    pub fn is_special(&self, id: u32) -> bool {
        matches!(
            self.vocab.kind(id),
            Some(TokenKind::Control | TokenKind::Unknown)
        )
    }
}
