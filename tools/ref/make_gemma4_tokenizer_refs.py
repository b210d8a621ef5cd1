#!/usr/bin/env python3
"""Reference ids for GGUF vocabularies with ``tokenizer.ggml.model = "gemma4"`` (Gemma 4's
SentencePiece-style BPE), written to tests/fixtures/tokenizer/gemma4*.json.

Two vocabularies:

* ``gemma4.json``: the real Gemma 4 vocabulary (262 144 tokens, merges), from the vocab-only GGUF
  that llama.cpp ships for its tokenizer tests (``models/ggml-vocab-gemma-4.gguf`` of the
  llama-cpp-python 0.3.36 sdist; copied to $OXINFER_TEST_MODELS, default
  ~/.cache/oxinfer/models, never committed). References per string of the shared corpus
  (tests/fixtures/tokenizer/corpus.json plus the seeded fuzz strings of make_tokenizer_refs.py):
  - llama.cpp: ``Llama(path, vocab_only=True).tokenize(text, add_bos=False, special=True)``;
  - transformers: ``GemmaTokenizer(vocab=..., merges=...)`` of transformers 5.24 (the class Gemma
    4's tokenizer_config.json names; BPE with byte fallback, ``" " -> "▁"`` normaliser) built from
    the GGUF's tokens and merges, control and user-defined tokens registered as added tokens;
  plus ``upstream``: llama.cpp's own test strings for this vocabulary (``.gguf.inp``) with the ids
  its ``.gguf.out`` records (written by llama.cpp's convert_hf_to_gguf_update.py from the hub's
  tokenizer.json through transformers).
* ``gemma4-tiny.json`` + ``gemma4-tiny-vocab.gguf``: a small tokenizer trained here with the
  ``tokenizers`` library in Gemma 4's shape (BPE, byte fallback, ``Replace(" ", "▁")``
  normaliser, ``Split(" ", merged_with_previous)`` pre-tokenizer, ``Replace/ByteFallback/Fuse``
  decoder: what transformers' GemmaTokenizer builds), saved with ``tokenizer_class =
  GemmaTokenizer`` next to the gemma4-tiny-dense config, and converted with llama.cpp's own
  converter (``convert_hf_to_gguf.py --vocab-only``, Gemma4Model.set_vocab). References:
  ``tokenizers`` on the saved tokenizer.json and llama.cpp on the converted GGUF. Newlines are
  kept out of merges when training (as in Gemma's vocabulary, and as llama.cpp's gemma4
  pre-tokenizer assumes: it splits at newline runs).

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_gemma4_tokenizer_refs.py [--llama-cpp DIR]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_tokenizer_refs as base  # noqa: E402
from llamacpp_convert import llama_cpp_source  # noqa: E402

REPO = HERE.parents[1]
OUT_DIR = REPO / "tests" / "fixtures" / "tokenizer"
VOCAB_NAME = "ggml-vocab-gemma-4.gguf"
TINY_FIXTURE = REPO / "tests" / "fixtures" / "gemma4-tiny-dense"

# Gemma 4 specials seen in chat prompts (ids from the real vocabulary), added to the corpus.
EXTRA = [
    "<bos><|turn>user\nHi there<turn|>\n<|turn>model\n",
    "<|channel>thought\nlet me think<channel|>The answer is 4.",
    "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "line one\n\n\n\nline five\n\n\n\n\n\n\n\n\n\nten newlines",
    "\n\n\n\n",
    "tab\there\t\tand\t\t\tmore",
    "trailing spaces   ",
    "   ",
    "a\u00a0b\u3000c",
]


def parse_upstream(src: Path) -> list[dict]:
    inp = (src / "models" / (VOCAB_NAME + ".inp")).read_text(encoding="utf-8")
    out = (src / "models" / (VOCAB_NAME + ".out")).read_text(encoding="utf-8")
    texts = inp.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1].endswith("\n__ggml_vocab_test__"):
        texts[-1] = texts[-1][: -len("\n__ggml_vocab_test__")]
    lines = out.split("\n")
    cases = []
    for i, text in enumerate(texts):
        if text == "" and i == len(texts) - 1:
            continue
        ids = [int(x) for x in lines[i].split()] if lines[i].strip() else []
        cases.append({"text": text, "upstream": ids})
    return cases


def gemma_tokenizer_from_gguf(path: Path):
    """transformers' GemmaTokenizer over the GGUF's vocabulary and merges."""
    import gguf
    from tokenizers import AddedToken
    from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

    r = gguf.GGUFReader(str(path))
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    merges = r.fields["tokenizer.ggml.merges"].contents()
    vocab = {t: i for i, t in enumerate(tokens)}
    # llama.cpp splits a merge at the first space after its first byte.
    pairs = [(m[:m.find(" ", 1)], m[m.find(" ", 1) + 1:]) for m in merges]
    tok = GemmaTokenizer(vocab=vocab, merges=pairs, unk_token="<unk>", bos_token="<bos>",
                         eos_token="<eos>", pad_token="<pad>", mask_token="<mask>")
    # CONTROL (3) and USER_DEFINED (4) tokens are matched in text, as llama.cpp does.
    added = [AddedToken(t, special=(ty == 3), normalized=False)
             for t, ty in zip(tokens, types) if ty in (3, 4)]
    tok._tokenizer.add_tokens(added)
    return tok


def real_vocab(llama_cpp, src: Path) -> None:
    vocab_src = src / "models" / VOCAB_NAME
    dst = base.MODELS / VOCAB_NAME
    if not dst.exists() or dst.stat().st_size != vocab_src.stat().st_size:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(vocab_src, dst)
        print(f"copied {vocab_src} -> {dst}")
    upstream = parse_upstream(src)
    texts = base.CORPUS + EXTRA + base.FUZZ + [c["text"] for c in upstream]
    lc_ids, lc_detok, lc_info = base.llama_cpp_refs(llama_cpp, dst, texts)
    tok = gemma_tokenizer_from_gguf(dst)
    hf_ids = [tok._tokenizer.encode(t, add_special_tokens=False).ids for t in texts]
    n_main = len(base.CORPUS) + len(EXTRA)
    n_fuzz = len(base.FUZZ)
    cases, fuzz, up = [], [], []
    disagree = {"corpus": 0, "fuzz": 0, "upstream_vs_llama_cpp": 0}
    for i, text in enumerate(texts):
        case = {"text": text, "llama_cpp": lc_ids[i], "transformers": hf_ids[i]}
        try:
            case["llama_cpp_decode"] = lc_detok[i].decode("utf-8")
        except UnicodeDecodeError:
            case["llama_cpp_decode_bytes"] = list(lc_detok[i])
        if i < n_main:
            cases.append(case)
            disagree["corpus"] += lc_ids[i] != hf_ids[i]
        elif i < n_main + n_fuzz:
            fuzz.append(case)
            disagree["fuzz"] += lc_ids[i] != hf_ids[i]
        else:
            u = upstream[i - n_main - n_fuzz]
            case["upstream"] = u["upstream"]
            disagree["upstream_vs_llama_cpp"] += u["upstream"] != lc_ids[i]
            up.append(case)
    doc = {
        "model": VOCAB_NAME,
        "source": f"llama-cpp-python {importlib.metadata.version('llama_cpp_python')} sdist, "
                  f"vendor/llama.cpp/models/{VOCAB_NAME}",
        "transformers": {"version": importlib.metadata.version("transformers"),
                         "tokenizers_version": importlib.metadata.version("tokenizers"),
                         "how": "GemmaTokenizer(vocab, merges) from the GGUF; CONTROL/USER_DEFINED "
                                "tokens added; encode(add_special_tokens=False)"},
        "llama_cpp": lc_info,
        "disagreements": disagree,
        "cases": cases,
        "fuzz": fuzz,
        "upstream": up,
    }
    base.write_doc(OUT_DIR / "gemma4.json", doc)
    print(f"gemma4: {len(cases)} corpus + {len(fuzz)} fuzz + {len(up)} upstream cases, "
          f"disagreements {disagree}")


def train_tiny(out_dir: Path) -> None:
    """A Gemma-4-shaped tokenizer.json (and tokenizer_config.json) trained on the corpus."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"]
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Replace(" ", "▁")
    # Training only: keep newline runs apart from other characters (Gemma's vocabulary has no
    # token mixing them; llama.cpp's gemma4 pre-tokenizer splits there).
    trainer_tok.pre_tokenizer = pre_tokenizers.Split(Regex("\n+"), behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=450, special_tokens=specials, initial_alphabet=[],
                                  limit_alphabet=120, show_progress=False)
    # Special-token strings are left out of the training text, so no merge builds a token that
    # swallows one (llama.cpp matches end-of-generation-looking texts such as <|im_end|> as
    # control tokens whatever their type, so such merges would differ by construction).
    strip = re.compile(r"<[^<>\s]{1,24}>")
    train_text = [strip.sub("", t) for t in base.CORPUS[:-1] + base.FUZZ[:200] + EXTRA for _ in range(2)]
    trainer_tok.train_from_iterator(train_text, trainer=trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    # Gemma's layout: special tokens, the 256 byte-fallback tokens <0xXX> (in the model's
    # vocabulary, not added tokens), then the learned pieces.
    pieces = [t for t, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]) if t not in specials]
    order = specials + [f"<0x{b:02X}>" for b in range(256)] + pieces
    vocab = {t: i for i, t in enumerate(order)}
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.add_special_tokens(specials)
    # What transformers' GemmaTokenizer builds.
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
        "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        "add_bos_token": True, "add_eos_token": False,
        "additional_special_tokens": ["<|turn>", "<turn|>"],
    }, indent=1))


def tiny_vocab(llama_cpp, src: Path) -> None:
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "ckpt"
        ck.mkdir()
        train_tiny(ck)
        hf = Tokenizer.from_file(str(ck / "tokenizer.json"))
        cfg = json.loads((TINY_FIXTURE / "config.json").read_text())
        cfg["vocab_size"] = hf.get_vocab_size()
        (ck / "config.json").write_text(json.dumps(cfg, indent=1))
        out = OUT_DIR / "gemma4-tiny-vocab.gguf"
        subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(ck), "--vocab-only",
                        "--outfile", str(out)], check=True,
                       env={**__import__("os").environ,
                            "PYTHONPATH": f"{src / 'gguf-py'}:{src}"})
        texts = base.CORPUS + EXTRA + base.FUZZ
        lc_ids, lc_detok, lc_info = base.llama_cpp_refs(llama_cpp, out, texts)
        hf_ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
        hf_dec = [hf.decode(s, skip_special_tokens=False) for s in hf_ids]
        n_main = len(base.CORPUS) + len(EXTRA)
        cases, fuzz = [], []
        disagree = {"corpus": 0, "fuzz": 0}
        for i, text in enumerate(texts):
            case = {"text": text, "llama_cpp": lc_ids[i], "tokenizers": hf_ids[i],
                    "tokenizers_decode": hf_dec[i]}
            try:
                case["llama_cpp_decode"] = lc_detok[i].decode("utf-8")
            except UnicodeDecodeError:
                case["llama_cpp_decode_bytes"] = list(lc_detok[i])
            key = "corpus" if i < n_main else "fuzz"
            disagree[key] += lc_ids[i] != hf_ids[i]
            (cases if i < n_main else fuzz).append(case)
        doc = {
            "model": out.name,
            "source": "tokenizers BpeTrainer (this script) in Gemma 4's shape, converted by llama.cpp's "
                      "convert_hf_to_gguf.py --vocab-only (llama-cpp-python 0.3.36 sdist)",
            "tokenizers": {"version": importlib.metadata.version("tokenizers"),
                           "tokenizer_json": json.loads((ck / "tokenizer.json").read_text())},
            "llama_cpp": lc_info,
            "disagreements": disagree,
            "cases": cases,
            "fuzz": fuzz,
        }
        base.write_doc(OUT_DIR / "gemma4-tiny.json", doc)
        print(f"gemma4-tiny: {hf.get_vocab_size()} tokens, {out.stat().st_size} bytes; "
              f"disagreements {disagree}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-cpp", help="llama.cpp source tree (default: the cached sdist)")
    ap.add_argument("--only", choices=["real", "tiny"])
    args = ap.parse_args()
    src = llama_cpp_source(args.llama_cpp)
    llama_cpp = base.load_llama_cpp()
    if llama_cpp is None:
        raise SystemExit("llama_cpp is required")
    if args.only != "tiny":
        real_vocab(llama_cpp, src)
    if args.only != "real":
        tiny_vocab(llama_cpp, src)


if __name__ == "__main__":
    main()
