#!/usr/bin/env python3
"""Make the tokenizer reference fixtures in tests/fixtures/tokenizer/.

Writes
* ``corpus.json``: the test strings (a JSON list; JSON keeps every whitespace run exact);
* ``<model>.json`` per GGUF model: for every corpus string the token ids from
  - llama.cpp (``llama_cpp.Llama(path, vocab_only=True).tokenize(text, add_bos=False, special=True)``),
    the primary reference for GGUF files, when ``llama_cpp`` is importable, and
  - transformers (``AutoTokenizer.from_pretrained(dir, gguf_file=NAME).encode(text, add_special_tokens=False)``),
  plus both decodes, the llama.cpp end-of-generation ids, BOS/EOS, and a digest of
  every token's llama.cpp piece bytes (``token_to_piece(id, special=True)``);
* ``variants.json``: llama.cpp's ids for the same texts with metadata-only copies of the GGUF files
  in which one key is changed (SmolLM2's vocabulary under other ``tokenizer.ggml.pre`` families,
  Gemma 3's with ``add_space_prefix`` on), to test every pre-tokenizer family and SentencePiece's
  space prefix against llama.cpp; the Rust test writes the same copies itself;
* ``smollm2-hf/``: SmolLM2's tokenizer as transformers saves it (tokenizer.json,
  tokenizer_config.json, chat_template.jinja), to test loading HF folders.

Models are read from $OXINFER_TEST_MODELS (default ~/.cache/oxinfer/models); they are never committed.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tokenizer_refs.py
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "fixtures" / "tokenizer"
MODELS = Path(os.environ.get("OXINFER_TEST_MODELS", Path.home() / ".cache" / "oxinfer" / "models"))
MODEL_FILES = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3": "gemma-3-270m-q4_k_m.gguf",
}
HF_EXPORT_LIMIT = 3 * 1024 * 1024

CORPUS = [
    # English
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see they've done it, isn't it? We'd better go; he's here.",
    "DON'T SHOUT'S 'quoted' \"double\" it’s curly’s",
    " leading space",
    "Once upon a time, in a land far, far away, there lived a small tokenizer who dreamed of "
    "splitting every string exactly the way its reference did. Every morning it woke up, "
    "read the corpus, and compared ids.",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "https://example.com/path/to?query=1&x=y#frag user@example.org",
    # code
    'fn main() {\n    println!("Hello, world!");\n}\n',
    "def foo(self, x):\n\tif x > 0:\n\t\treturn x ** 2 + 1  # square\n\treturn None\n",
    "    indented = [1, 2, 3]\n        deeper = {'a': 1}\n",
    '<html><body class="main">&amp; &lt;tag&gt;</body></html>',
    '{"name": "oxinfer", "version": [0, 1, 0], "ok": true, "none": null}',
    "x+=1;y-=2;z*=3;w/=4;a%=5;b&&c||d!=e==f<=g>=h->i=>j::k",
    "#include <stdio.h>\nint main(void) { return 0; }",
    # numbers
    "1234567",
    "3.14159",
    "12,345,678.90 and -0.001 and 1e-10 and 6.022e23",
    "0x1F 0b1010 0o777 007",
    "2024-01-15T10:30:00Z 23:59:59",
    "Call 555-0123 or +1 (800) 555-0199.",
    "½ ¾ ² ³ Ⅻ ٣٤٥ ४५६ ①②",
    # whitespace
    "   three leading spaces",
    "trailing spaces   ",
    "multiple   spaces    between     words",
    "\t\ttabs\tand\ttabs\t",
    "line1\nline2\n\nline4\r\nline5\rline6",
    "\n\n\n",
    " ",
    "  ",
    "\n",
    "\t",
    "a \n b \n\n c",
    "  \n  \n    x",
    "end with newline\n",
    # accents, European languages
    "café naïve résumé coöperate fiancée",
    "Ça va ? Où est l'hôtel ? À bientôt, Élodie.",
    "Größe Straße übermäßig schön; Äpfel, Öl, Übung.",
    "¿Qué tal? ¡Muy bien! El niño comió piñata.",
    "Zażółć gęślą jaźń. Příliš žluťoučký kůň.",
    "Привет, мир! Как дела? Съешь ещё этих мягких французских булок.",
    "Γειά σου Κόσμε",
    # CJK and other scripts
    "你好，世界！这是一个测试。",
    "日本語のテキストです。カタカナとひらがな、漢字。",
    "한국어 텍스트입니다.",
    "مرحبا بالعالم، كيف حالك؟",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "abc日本語def123中文ghi",
    # emoji
    "🤗🚀🎉",
    "I ❤️ Rust 🦀!",
    "👨‍👩‍👧‍👦 family",
    "🏳️‍🌈 🏴‍☠️",
    "🇺🇸🇫🇷🇯🇵🇩🇪",
    "👍🏽👋🏿",
    "😀😃😄😁😆😅😂🤣",
    # special-token strings embedded in text
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "text<|im_end|>more text",
    "<|im_start|><|im_end|><|endoftext|>",
    "<|im_start partial <|im_end",
    "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos>",
    "<pad><mask><unk>",
    "<unused0> and <unused12>",
    "<repo_name>oxinfer<file_sep>main.rs",
    # odd characters
    "a\u200bb\u200cc\u200dd",
    "a\u00a0b\u2003c\u3000d",
    "e\u0301 vs \u00e9",
    "ﬁ ﬂ ligatures",
    "∑∫√∞≠≤≥ ∀x∈ℝ",
    "┌─┐│└┘ ░▒▓█",
    "▁ literal lower block ▁▁",
    "Ġ literal Ċ",
    "<0x41> literal byte token text",
    "\u0001\u0002\u007f control",
    "\U0001F600\U0010FFFF\U000E0001",
    "\ufeffBOM at start",
    "mixed: Hello мир 世界 🌍 123!",
]
# One long input: every line above, joined.
CORPUS.append("\n\n".join(CORPUS))

# Pieces that random strings are made of (seeded, so the fixture is reproducible).
FUZZ_PIECES = (
    list("abcXYZ019 \t\n\r'\".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`")
    + [" ", "  ", "   ", "\n\n", " \n", "\t\t", "'s", "'t", "'ll", "'S", "’s", "'RE", "the", " the", "The"]
    + list("éèàçüöäßñÅø") + ["e\u0301", "a\u0308", "\u0301"]
    + ["日本", "語", "中文", "한국", "ひらがな", "カタカナ", "مرح", "با", "नमस्", "ते", "สวั", "ดี", "Привет", "мир"]
    + ["🤗", "🚀", "👍🏽", "❤️", "\u200d", "\ufe0f", "🇺🇸", "👨‍👩‍👧", "😀"]
    + ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>"]
    + ["<unused5>", "<0x41>", "▁", "▁▁", "Ġ", "<|im", "_end|>", "<pad>", "<mask>"]
    + ["½", "²", "٣", "४", "①", "12", "345", "3.14", "1,000"]
    + ["\u00a0", "\u3000", "\u2003", "\u200b", "\x0b", "\x0c", "\x85", "\u2028", "\x00", "\x7f", "\U0010ffff"]
)


def fuzz_strings(n: int = 400, seed: int = 20240611) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_PIECES) for _ in range(rng.randint(1, 24))) for _ in range(n)]


FUZZ = fuzz_strings()


def load_llama_cpp():
    try:
        import llama_cpp  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the venv
        print(f"llama_cpp not importable ({exc}); llama.cpp references skipped", file=sys.stderr)
        return None
    return llama_cpp


def fnv1a64(data: bytes, h: int = 0xCBF29CE484222325) -> int:
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def llama_cpp_refs(llama_cpp, path: Path, texts: list[str]):
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    def piece(tok: int) -> bytes:
        buf = (llama_cpp.ctypes.c_char * 256)()
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 256, 0, True)
        if n < 0:
            buf = (llama_cpp.ctypes.c_char * (-n))()
            n = llama_cpp.llama_token_to_piece(vocab, tok, buf, -n, 0, True)
        return bytes(buf[:n])

    digest = 0xCBF29CE484222325
    eog = []
    for tok in range(n_vocab):
        p = piece(tok)
        digest = fnv1a64(len(p).to_bytes(4, "little") + p, digest)
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            eog.append(tok)
    ids = [llm.tokenize(text.encode("utf-8"), add_bos=False, special=True) for text in texts]
    detok = [b"".join(piece(t) for t in seq) for seq in ids]
    info = {
        "version": getattr(llama_cpp, "__version__", "unknown"),
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "eot_id": llama_cpp.llama_vocab_eot(vocab),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        "eog_ids": eog,
        "pieces_fnv1a64": f"{digest:016x}",
        "pieces_sample": {str(t): list(piece(t)) for t in sorted(set(range(0, 300)) | {i for s in ids for i in s})},
        # llama.cpp's BOS-prefixed encoding of a plain sentence, to test add_bos.
        "with_bos": llm.tokenize(b"Hello world", add_bos=True, special=True),
    }
    return ids, detok, info


def transformers_refs(path: Path, texts: list[str]):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ids = [tok.encode(text, add_special_tokens=False) for text in texts]
    dec = [tok.decode(seq) for seq in ids]
    info = {
        "version": importlib.metadata.version("transformers"),
        "tokenizers_version": importlib.metadata.version("tokenizers"),
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
    }
    return tok, ids, dec, info


def export_hf(tok, out: Path, name: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        # tokenizers writes tokenizer.json pretty-printed (one merge part per line); the same
        # JSON written compactly is about half the size.
        tj = Path(tmp) / "tokenizer.json"
        if tj.exists():
            obj = json.loads(tj.read_text(encoding="utf-8"))
            tj.write_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
        files = sorted(p for p in Path(tmp).iterdir() if p.is_file())
        size = sum(p.stat().st_size for p in files)
        if size > HF_EXPORT_LIMIT:
            print(f"{name}: HF export is {size} bytes > {HF_EXPORT_LIMIT}; not written", file=sys.stderr)
            return False
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        for p in files:
            shutil.copy(p, out / p.name)
        print(f"{name}: wrote {[p.name for p in files]} ({size} bytes) to {out}")
    # The exported folder must tokenize like the GGUF-loaded tokenizer it came from.
    from transformers import AutoTokenizer

    reloaded = AutoTokenizer.from_pretrained(str(out))
    for text in CORPUS:
        a = tok.encode(text, add_special_tokens=False)
        b = reloaded.encode(text, add_special_tokens=False)
        if a != b:
            raise SystemExit(f"{name}: exported folder tokenizes {text!r} as {b}, not {a}")
    return True


# (model key, metadata key, value) of each variant.
VARIANTS = [
    ("smollm2", "tokenizer.ggml.pre", "gpt-2"),
    ("smollm2", "tokenizer.ggml.pre", "default"),
    ("smollm2", "tokenizer.ggml.pre", "llama-bpe"),
    ("smollm2", "tokenizer.ggml.pre", "qwen2"),
    ("smollm2", "tokenizer.ggml.pre", "qwen35"),
    ("smollm2", "tokenizer.ggml.pre", "gpt-4o"),
    ("smollm2", "tokenizer.ggml.pre", "tekken"),
    ("smollm2", "tokenizer.ggml.pre", "deepseek-v3"),
    ("gemma3", "tokenizer.ggml.add_space_prefix", True),
]
# Texts of the variant tests: the corpus without its joined line, and the first fuzz strings.
VARIANT_TEXTS = CORPUS[:-1] + FUZZ[:150]


def metadata_copy(src: Path, dst: Path, key: str, value) -> None:
    """A GGUF with every metadata key of `src` (one changed) and no tensors."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(dst), arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        val = value if name == key else field.contents()
        writer.add_key_value(name, val, vtype, sub)
    if key not in reader.fields:
        vtype = gguf.GGUFValueType.BOOL if isinstance(value, bool) else gguf.GGUFValueType.STRING
        writer.add_key_value(key, value, vtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def variant_refs(llama_cpp) -> dict:
    out = {"texts": VARIANT_TEXTS, "variants": []}
    with tempfile.TemporaryDirectory() as tmp:
        for key, meta_key, value in VARIANTS:
            dst = Path(tmp) / f"{key}-variant.gguf"
            metadata_copy(MODELS / MODEL_FILES[key], dst, meta_key, value)
            llm = llama_cpp.Llama(model_path=str(dst), vocab_only=True, verbose=False)
            ids = [llm.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in VARIANT_TEXTS]
            out["variants"].append({"model": MODEL_FILES[key], "key": meta_key, "value": value, "llama_cpp": ids})
            print(f"variant {key} {meta_key}={value!r}: {sum(map(len, ids))} ids")
            del llm
    return out


def write_doc(path: Path, doc: dict) -> None:
    """JSON with one line per top-level key and one line per case (small diffs, small files)."""
    lines = ["{"]
    keys = list(doc)
    for k, key in enumerate(keys):
        comma = "," if k + 1 < len(keys) else ""
        value = doc[key]
        if isinstance(value, list):
            lines.append(f"{json.dumps(key)}: [")
            for i, item in enumerate(value):
                item_comma = "," if i + 1 < len(value) else ""
                lines.append(" " + json.dumps(item, ensure_ascii=False) + item_comma)
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "corpus.json").write_text(json.dumps(CORPUS, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    llama_cpp = load_llama_cpp()
    texts = CORPUS + FUZZ
    for key, fname in MODEL_FILES.items():
        path = MODELS / fname
        if not path.exists():
            print(f"skipped: {path} not found", file=sys.stderr)
            continue
        tok, hf_ids, hf_dec, hf_info = transformers_refs(path, texts)
        if key == "smollm2":
            export_hf(tok, OUT_DIR / "smollm2-hf", key)
        if llama_cpp is not None:
            lc_ids, lc_detok, lc_info = llama_cpp_refs(llama_cpp, path, texts)
        else:
            lc_ids, lc_detok, lc_info = [None] * len(texts), [None] * len(texts), None
        cases, fuzz = [], []
        disagree = {"corpus": 0, "fuzz": 0}
        for i, text in enumerate(texts):
            is_fuzz = i >= len(CORPUS)
            case = {"text": text, "transformers": hf_ids[i], "transformers_decode": hf_dec[i]}
            if lc_ids[i] is not None:
                case["llama_cpp"] = lc_ids[i]
                try:
                    case["llama_cpp_decode"] = lc_detok[i].decode("utf-8")
                except UnicodeDecodeError:
                    case["llama_cpp_decode_bytes"] = list(lc_detok[i])
                if lc_ids[i] != hf_ids[i]:
                    disagree["fuzz" if is_fuzz else "corpus"] += 1
            (fuzz if is_fuzz else cases).append(case)
        doc = {
            "model": fname,
            "transformers": hf_info,
            "llama_cpp": lc_info,
            "disagreements": disagree,
            "cases": cases,
            "fuzz": fuzz,
        }
        out = OUT_DIR / f"{key}.json"
        write_doc(out, doc)
        print(f"{key}: {len(cases)} corpus + {len(fuzz)} fuzz cases, llama.cpp/transformers disagreements {disagree} -> {out}")
    if llama_cpp is not None and all((MODELS / f).exists() for f in MODEL_FILES.values()):
        write_doc(OUT_DIR / "variants.json", variant_refs(llama_cpp))


if __name__ == "__main__":
    main()
