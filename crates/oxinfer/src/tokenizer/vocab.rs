//! The vocabulary shared by every tokenizer back end: token texts, kinds, scores, the decoded bytes
//! of each token and the end-of-generation rules llama.cpp applies.

use std::collections::HashMap;

/// What a vocabulary entry is, as GGUF's `tokenizer.ggml.token_type` says (llama.cpp's numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenKind {
    /// An ordinary text piece (type 1).
    Normal,
    /// The unknown token (type 2).
    Unknown,
    /// A control token such as `<|im_start|>` or `<eos>` (type 3).
    Control,
    /// A user-defined token, matched verbatim in text before the model runs (type 4).
    UserDefined,
    /// An unused slot (type 5).
    Unused,
    /// A byte-fallback token `<0xXX>` (type 6).
    Byte,
    /// Any other value of the type field (0 in llama.cpp's numbering).
    Undefined,
}

impl TokenKind {
    /// The kind for GGUF's integer token type.
    pub fn from_gguf(t: i64) -> Self {
        match t {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Whether text containing this token's string is split there before the model runs
    /// (llama.cpp's special-token cache: control, user-defined and unknown tokens).
    pub(crate) fn is_matched_in_text(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }
}

/// Token texts that llama.cpp treats as end of generation whatever their metadata says
/// (`llama_vocab::impl::load`, the `special_eog_ids` loop).
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fill-in-the-middle pad/repo/file-separator texts that llama.cpp also counts as end of
/// generation (`special_fim_pad_id`, `special_fim_rep_id`, `special_fim_sep_id`).
pub(crate) const FIM_EOG_TEXTS: &[&[&str]] = &[
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];

/// Fill-in-the-middle prefix/suffix/middle texts that llama.cpp marks as control tokens.
pub(crate) const FIM_CONTROL_TEXTS: &[&[&str]] = &[
    &[
        "<|fim_prefix|>",
        "<fim-prefix>",
        "<fim_prefix>",
        "<｜fim▁begin｜>",
        "<PRE>",
        "▁<PRE>",
        "<|code_prefix|>",
        "<|prefix|>",
    ],
    &[
        "<|fim_suffix|>",
        "<fim-suffix>",
        "<fim_suffix>",
        "<｜fim▁hole｜>",
        "<SUF>",
        "▁<SUF>",
        "<|code_suffix|>",
        "<|suffix|>",
    ],
    &[
        "<|fim_middle|>",
        "<fim-middle>",
        "<fim_middle>",
        "<｜fim▁end｜>",
        "<MID>",
        "▁<MID>",
        "<|code_middle|>",
        "<|middle|>",
    ],
];

/// The vocabulary: one entry per id.
#[derive(Debug, Clone)]
pub(crate) struct Vocab {
    /// Token strings as stored (`Ġworld`, `▁world`, `<0x0A>`, `<|im_end|>`).
    pub texts: Vec<String>,
    /// Token kinds.
    pub kinds: Vec<TokenKind>,
    /// SentencePiece scores (0 where the vocabulary has none).
    pub scores: Vec<f32>,
    /// The bytes each token contributes to decoded text.
    pub bytes: Vec<Box<[u8]>>,
    /// Text to id (the first id wins for a repeated text).
    pub to_id: HashMap<String, u32>,
}

impl Vocab {
    /// A vocabulary from texts and kinds; `bytes` starts as the UTF-8 of each text.
    pub fn new(texts: Vec<String>, kinds: Vec<TokenKind>, scores: Vec<f32>) -> Self {
        let mut to_id = HashMap::with_capacity(texts.len());
        for (i, t) in texts.iter().enumerate() {
            if !t.is_empty() {
                to_id.entry(t.clone()).or_insert(i as u32);
            }
        }
        let bytes = texts
            .iter()
            .map(|t| t.as_bytes().to_vec().into_boxed_slice())
            .collect();
        Vocab {
            texts,
            kinds,
            scores,
            bytes,
            to_id,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// The id of a token text.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.to_id.get(text).copied()
    }

    /// The kind of a token, `None` when out of range.
    pub fn kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// Marks the tokens llama.cpp recognises by text as control tokens and returns the
    /// end-of-generation set: `eos`, `eot`, `eom`, every token named in [`EOG_TEXTS`] and the
    /// first fill-in-the-middle pad/repo/separator token found, sorted and deduplicated.
    pub fn end_of_generation(&mut self, declared: &[Option<u32>]) -> Vec<u32> {
        let mut out: Vec<u32> = declared.iter().flatten().copied().collect();
        // Fill-in-the-middle prefix/suffix/middle tokens become control tokens (not end of
        // generation).
        for group in FIM_CONTROL_TEXTS {
            if let Some(id) = group.iter().find_map(|t| self.id(t)) {
                self.kinds[id as usize] = TokenKind::Control;
            }
        }
        for text in EOG_TEXTS {
            if let Some(id) = self.id(text) {
                out.push(id);
                self.kinds[id as usize] = TokenKind::Control;
            }
        }
        for group in FIM_EOG_TEXTS {
            // llama.cpp keeps the first match it meets in a hash map; any match is the same set
            // when a vocabulary holds one spelling, which is the case in practice.
            if let Some(id) = group.iter().find_map(|t| self.id(t)) {
                out.push(id);
                self.kinds[id as usize] = TokenKind::Control;
            }
        }
        // gpt-oss: these are always rendered, never end generation (llama.cpp's quick hack).
        for text in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.id(text) {
                self.kinds[id as usize] = TokenKind::UserDefined;
            }
        }
        out.sort_unstable();
        out.dedup();
        // o200k_harmony / solar-open: "<|end|>" is not end of generation when "<|return|>" and
        // "<|call|>" (or "<|calls|>" and "<|flush|>") exist.
        let has = |t: &str| self.id(t).is_some_and(|id| out.binary_search(&id).is_ok());
        if let Some(end) = self.id("<|end|>") {
            if (has("<|return|>") && has("<|call|>")) || (has("<|calls|>") && has("<|flush|>")) {
                out.retain(|&i| i != end);
                self.kinds[end as usize] = TokenKind::UserDefined;
            }
        }
        // Gemma 4 / PLaMo: "</s>" is a normal token when "<|tool_response>" (or "<|plamo:eos|>")
        // ends generation too.
        let has = |t: &str| self.id(t).is_some_and(|id| out.binary_search(&id).is_ok());
        let normal_s_marker = has("<|tool_response>") || has("<|plamo:eos|>");
        if let Some(s) = self.id("</s>") {
            if normal_s_marker {
                out.retain(|&i| i != s);
                self.kinds[s as usize] = TokenKind::Normal;
            }
        }
        out
    }
}
