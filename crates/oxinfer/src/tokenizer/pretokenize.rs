//! Pre-tokenizer regular expressions of byte-level BPE vocabularies, per `tokenizer.ggml.pre`, as
//! llama.cpp defines them (`llm_tokenizer_bpe`). Each family is a list of expressions applied one
//! after the other: every match and every stretch between matches becomes a piece that the next
//! expression splits further.

/// GPT-2's expression (`gpt-2`, `mpt`, `olmo`, `phi-2`, ... and the second step of `smollm`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's expression with llama.cpp's case-insensitive contractions spelled out.
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 2's expression: Llama 3's with single digits.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen 3.5's expression: Qwen 2's with combining marks kept with letters.
const QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// GPT-4o / Llama 4's expression as llama.cpp adapts it: a letter "not a-z" / "not A-Z" stands
/// for the upper/lower-case classes (so combining marks do not join words, unlike the original
/// `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]` classes).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken expression, adapted like [`GPT4O`].
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek V3's expression (three steps).
const DEEPSEEK3: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// How a byte-level BPE vocabulary is pre-tokenized and what llama.cpp's flags for it are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PreTokenizer {
    /// The family name used (after aliasing and fallback).
    pub name: &'static str,
    /// The expressions, applied in order.
    pub regexes: Vec<&'static str>,
    /// Whether a whole piece found in the vocabulary is taken as is, without merges.
    pub ignore_merges: bool,
    /// llama.cpp's default for `add_bos` when the metadata does not say.
    pub add_bos_default: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value (`None`: the key is absent). Unknown
    /// values fall back to GPT-2's expression; the second value says so (for a warning).
    pub fn for_name(pre: Option<&str>) -> (Self, bool) {
        let p = |name, regexes: Vec<&'static str>| PreTokenizer {
            name,
            regexes,
            ignore_merges: false,
            add_bos_default: false,
        };
        let pre_tok = match pre.unwrap_or("default") {
            "default" => p(
                "default",
                vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            ),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral"
            | "midm-2.0" | "lfm2" | "jina-v5-nano" => PreTokenizer {
                ignore_merges: true,
                add_bos_default: true,
                ..p("llama-bpe", vec![LLAMA3])
            },
            "dbrx" | "smaug-bpe" | "glm4" | "chatglm-bpe" => p("llama-bpe", vec![LLAMA3]),
            "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2"
            | "hunyuan" | "solar-open" => p("qwen2", vec![QWEN2]),
            "qwen35" => p("qwen35", vec![QWEN35]),
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone"
            | "minerva-7b" | "mellum2" => p("smollm", vec![r"\p{N}", GPT2]),
            "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es"
            | "jina-v2-de" | "a.x-4.0" | "mellum" | "modern-bert" | "mpt" | "olmo" | "jais"
            | "trillion" | "granite-docling" | "exaone4" | "jina-v1-en" | "jina-v2-code"
            | "roberta-bpe" => p("gpt-2", vec![GPT2]),
            "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => p("gpt-4o", vec![GPT4O]),
            "tekken" => PreTokenizer {
                ignore_merges: true,
                add_bos_default: true,
                ..p("tekken", vec![TEKKEN])
            },
            "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => {
                p("deepseek-v3", DEEPSEEK3.to_vec())
            }
            _ => return (p("gpt-2", vec![GPT2]), true),
        };
        (pre_tok, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families() {
        assert_eq!(PreTokenizer::for_name(Some("smollm")).0.regexes.len(), 2);
        let (l3, unknown) = PreTokenizer::for_name(Some("llama-bpe"));
        assert!(l3.ignore_merges && l3.add_bos_default && !unknown);
        assert_eq!(PreTokenizer::for_name(None).0.name, "default");
        let (fallback, unknown) = PreTokenizer::for_name(Some("no-such-family"));
        assert!(unknown);
        assert_eq!(fallback.regexes, vec![GPT2]);
    }
}
