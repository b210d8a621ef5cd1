//! Incremental decoding: tokens in, complete UTF-8 text out.

use super::Tokenizer;

/// Decodes a stream of token ids into text, holding back the bytes of a character split across
/// tokens (byte-level BPE pieces, byte-fallback tokens) until it is complete.
///
/// A decoder from [`Tokenizer::stream`] continues a prompt: every token adds its piece as is, as
/// llama.cpp prints generated tokens. One from [`Tokenizer::stream_from_start`] decodes a text
/// from its start: the concatenation of every [`push`](Self::push) and the final
/// [`finish`](Self::finish) equals [`Tokenizer::decode`] of all the ids (which, for SentencePiece
/// vocabularies with `add_space_prefix`, drops the first token's leading space).
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    pending: Vec<u8>,
    from_start: bool,
    first: bool,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder continuing a prompt (`from_start = false`) or decoding a text from its start.
    pub fn new(tokenizer: &'a Tokenizer, from_start: bool) -> Self {
        StreamDecoder {
            tokenizer,
            pending: Vec::new(),
            from_start,
            first: from_start,
        }
    }

    /// Adds one token and returns the text it completes (possibly empty). Ids outside the
    /// vocabulary contribute nothing. Invalid byte sequences come out as U+FFFD, as in
    /// [`Tokenizer::decode`].
    pub fn push(&mut self, id: u32) -> String {
        let bytes = self.tokenizer.token_bytes(id).unwrap_or_default();
        let bytes = if self.first {
            self.tokenizer.strip_first(bytes)
        } else {
            bytes
        };
        self.first = false;
        self.pending.extend_from_slice(bytes);
        self.take_complete()
    }

    /// Returns whatever is still held back (an incomplete character becomes U+FFFD) and resets
    /// the decoder to its initial state.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.first = self.from_start;
        out
    }

    /// Whether bytes of an incomplete character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Emits the longest prefix of `pending` that cannot change with more bytes.
    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix is valid UTF-8 by construction.
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match e.error_len() {
                        // Invalid bytes: replace them like from_utf8_lossy does.
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + n..];
                        }
                        // An incomplete character at the end: wait for more bytes.
                        None => {
                            rest = &rest[valid..];
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.to_vec();
        self.pending = keep;
        out
    }
}
