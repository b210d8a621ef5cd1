#!/usr/bin/env python3
"""Make the WordPiece tokenizer fixture in tests/fixtures/bert-tokenizer/.

Writes
* ``tokenizer.json`` / ``tokenizer_config.json``: all-MiniLM-L6-v2's (BERT uncased) tokenizer;
* ``refs.json``: for every string (the LLM tokenizer corpus of tests/fixtures/tokenizer/corpus.json
  plus WordPiece cases: accents, CJK, punctuation, control characters, very long words) the ids
  of ``tok.encode(text, add_special_tokens=False)`` and of ``tok(text)`` (with [CLS]/[SEP]),
  plus pairs with their ``token_type_ids`` and truncated encodings (``longest_first``).

The model folder is read from $OXINFER_MINILM (default ~/.cache/oxinfer/models/all-MiniLM-L6-v2,
where ``oxinfer pull all-minilm-l6-v2`` unpacks it). Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_bert_tokenizer_refs.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import tokenizers
import transformers
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "bert-tokenizer"
MODEL = Path(os.environ.get("OXINFER_MINILM",
                            Path.home() / ".cache" / "oxinfer" / "models" / "all-MiniLM-L6-v2"))

EXTRA = [
    "",
    "   ",
    "\u0000\u0001\ufffd",  # removed by clean_text: empty after normalization
    "\u200b\u200d",
    "Héllo WÖRLD ÀÉÎÕÜ ñ ç",
    "e\u0301 combining acute, A\u030A ring",
    "ﬁ ligature ＦＵＬＬＷＩＤＴＨ ①",
    "中文字符测试，和English混合。",
    "漢字かなカナ한글",
    "don't stop-believing... (really?!) [yes] {no} <maybe> @#$%^&*_+=|\\~`",
    "“smart quotes” — dashes – and … ellipsis",
    "a" * 99,
    "b" * 100,
    "c" * 101,
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "unaffable unbelievably tokenization",
    "[CLS] literal [SEP] and [MASK] and [mask] and [UNK]",
    "tab\tnew\nline\r\nreturn",
    "Ελληνικά русский עברית العربية हिन्दी ไทย",
    "🤗 emoji 🚀 are [UNK]?",
    "12345 3.14 1,000,000 -7 1e10",
]

PAIRS = [
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("short", "a much longer second sequence that goes on and on for quite a while"),
    ("", "only b"),
]

TRUNCATE = [
    ("The quick brown fox jumps over the lazy dog. " * 20, None, 16),
    ("one two three four five six seven eight nine ten", "alpha beta gamma delta", 10),
    ("a b", "c d e f g h i j k l m n o p", 8),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(MODEL / name, OUT / name)
    tok = AutoTokenizer.from_pretrained(str(OUT))
    assert tok.is_fast
    corpus = json.loads((REPO / "tests/fixtures/tokenizer/corpus.json").read_text())
    texts = corpus + EXTRA
    singles = [
        {
            "text": t,
            "ids": tok.encode(t, add_special_tokens=False),
            "with_specials": tok(t)["input_ids"],
        }
        for t in texts
    ]
    pairs = []
    for a, b in PAIRS:
        e = tok(a, b)
        pairs.append({"a": a, "b": b, "ids": e["input_ids"], "type_ids": e["token_type_ids"]})
    truncated = []
    for a, b, n in TRUNCATE:
        e = tok(a, b, truncation="longest_first", max_length=n) if b else tok(
            a, truncation=True, max_length=n)
        truncated.append({"a": a, "b": b, "max_length": n, "ids": e["input_ids"],
                          "type_ids": e["token_type_ids"]})
    refs = {
        "source": "all-MiniLM-L6-v2 tokenizer.json via transformers fast tokenizer",
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        "singles": singles,
        "pairs": pairs,
        "truncated": truncated,
    }
    (OUT / "refs.json").write_text(json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {OUT} ({len(singles)} strings, {len(pairs)} pairs, {len(truncated)} truncated)")


if __name__ == "__main__":
    main()
