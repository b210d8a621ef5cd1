#!/usr/bin/env python3
"""Token ids of the built-in CLIP tokenizer's vocabulary, from transformers and open_clip.

oxinfer embeds CLIP's BPE merges (crates/oxinfer/src/arch/diffusion/data/clip_bpe_merges.txt.gz,
the first 48,895 lines of open_clip's bpe_simple_vocab_16e6.txt.gz) and builds the 49,408-token
vocabulary from them as open_clip and OpenAI's CLIP do (256 byte symbols, the same with `</w>`,
one token per merge, `<|startoftext|>`, `<|endoftext|>`). This script builds that vocabulary from
the original file of the open_clip wheel, writes it as vocab.json / merges.txt, and records for
each test string the 77 ids that

  - transformers' CLIPTokenizer gives, padded as SD 1.x pads (`<|endoftext|>`, the tokenizer of
    openai/clip-vit-large-patch14) and as SD 2.x pads (`!`, id 0, stabilityai/stable-diffusion-2's
    tokenizer), with padding="max_length", max_length=77, truncation=True (diffusers' call);
  - open_clip.tokenize gives (SD 2.x's original tokenizer: pads with 0).

open_clip cleans text differently (ftfy.fix_text, html.unescape twice; its special tokens are
spelled `<start_of_text>`), and transformers' SD 2.x tokenizer splits every `!` out as the pad
token, so the two agree only on some strings: `open_clip_agrees` says on which, and this script
asserts it (the Rust test then checks oxinfer against open_clip on exactly those).

Writes tests/fixtures/clip_tokenizer/builtin_ids.json. Run from the repository root:
  ~/.cache/oxinfer/refvenv/bin/python tools/ref/make_clip_tokenizer_refs.py /path/to/bpe_simple_vocab_16e6.txt.gz
(open_clip_torch 3.3.0: `pip download --no-deps open_clip_torch`, the file is open_clip/ in the
wheel; `pip install ftfy` and the wheel with --no-deps for open_clip.tokenize).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import open_clip
import transformers
from open_clip.tokenizer import bytes_to_unicode
from transformers import CLIPTokenizer

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED = ROOT / "crates/oxinfer/src/arch/diffusion/data/clip_bpe_merges.txt.gz"
OUT = ROOT / "tests/fixtures/clip_tokenizer/builtin_ids.json"
MERGES = 49152 - 256 - 2

CASES = [
    "a photo of an astronaut riding a horse on the moon",
    "",
    "   ",
    "A Photo Of An ASTRONAUT",
    "  extra   spaces\tand\ttabs\nand newlines  ",
    "hello, world. how are you?",
    "it's a cat's toy, isn't it? we'll see; they'd've",
    "1234567890 3.14159 1/2 50% 1,000,000",
    "4k, 8k uhd, masterpiece, best quality, ultra-detailed",
    "portrait of a woman, (highly detailed:1.2), [blurry], {sharp}",
    "caf\u00e9 na\u00efve \u00fcber r\u00e9sum\u00e9 \u00e0 la carte",
    "emoji \U0001f600\U0001f680\U0001f3a8 and \u2764\ufe0f",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0 \u4e2d\u6587 \ud55c\uad6d\uc5b4",
    "\u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u0442\u0435\u043a\u0441\u0442 \u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947",
    "cafe\u0301 (combining accent: NFC)",
    "snake_case camelCase kebab-case dotted.name",
    "email@example.com https://example.com/path?q=1&x=2",
    "C++ and C# are #1 @home $100 ^_^ ~tilde~ `code`",
    "wow!!! really?! yes!",
    "<|startoftext|>hello<|endoftext|> world",
    " ".join(["horse"] * 100),
    " ".join(f"w{i}" for i in range(80)),
    "a" * 300,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "a beautiful landscape painting of mountains and a lake at sunset, trending on artstation, "
    "by greg rutkowski and alphonse mucha, octane render, unreal engine, volumetric lighting",
    "'quoted' \"double\" (parens) [brackets] {braces} <angles>",
    "tab\tseparated\tvalues",
    "MiXeD CaSe WoRdS 123ABC abc123",
    "\u00bd \u2153 \u00b2 \u2460 \u2163",
    "hyphen\u2011non-breaking and em\u2014dash and en\u2013dash",
    "\u00df \u0130stanbul \u03a3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2",
    "zero\u200bwidth space",
    "the end.",
]


def main():
    src = Path(sys.argv[1])
    lines = gzip.open(src).read().decode("utf-8").split("\n")
    embedded = gzip.open(EMBEDDED).read().decode("utf-8").split("\n")
    assert embedded[: MERGES + 1] == lines[: MERGES + 1], "embedded merges differ from the original"
    merges = [tuple(m.split()) for m in lines[1 : MERGES + 1]]
    assert all(len(m) == 2 for m in merges)
    vocab = list(bytes_to_unicode().values())
    vocab = vocab + [v + "</w>" for v in vocab] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    assert len(vocab) == 49408
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}, ensure_ascii=False))
        (Path(d) / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        toks = {
            pad_name: CLIPTokenizer(vocab=str(Path(d) / "vocab.json"), merges=str(Path(d) / "merges.txt"),
                                    pad_token=pad, model_max_length=77)
            for pad_name, pad in (("sd1", "<|endoftext|>"), ("sd2", "!"))
        }
    oc = open_clip.get_tokenizer("ViT-H-14")
    assert oc.vocab_size == 49408
    cases = []
    for text in CASES:
        row = {"text": text}
        for name, tok in toks.items():
            row[name] = tok(text, padding="max_length", max_length=77, truncation=True).input_ids
            assert len(row[name]) == 77
        row["open_clip"] = oc([text])[0].tolist()
        row["open_clip_agrees"] = row["open_clip"] == row["sd2"]
        cases.append(row)
    agree = sum(c["open_clip_agrees"] for c in cases)
    # They must agree wherever no '!' (transformers' SD 2.x pad token, split out of the text) and
    # no special token's spelling is in the text.
    for c in cases:
        t = c["text"]
        if "!" not in t and "<|" not in t:
            assert c["open_clip_agrees"], f"open_clip differs on {t!r}"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "versions": {"transformers": transformers.__version__, "open_clip": open_clip.__version__},
        "source": {"file": src.name, "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
                   "embedded_sha256": hashlib.sha256(EMBEDDED.read_bytes()).hexdigest()},
        "cases": cases,
    }, ensure_ascii=False, indent=0))
    print(f"wrote {OUT}: {len(cases)} strings, open_clip agrees on {agree}")


if __name__ == "__main__":
    main()
