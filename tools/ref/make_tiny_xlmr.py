#!/usr/bin/env python3
"""Make the tiny random XLM-RoBERTa fixtures: tests/fixtures/xlmr-tiny/ (a sentence-transformers
embedding model in the BGE-M3 / multilingual-e5 layout) and tests/fixtures/xlmr-cross-encoder/
(a bge-reranker-v2-m3-style XLMRobertaForSequenceClassification), with their references.

The tokenizer: a SentencePiece Unigram model (``sentencepiece`` trainer, 1,000 pieces,
``nmt_nfkc`` rule, so it carries a precompiled normalization charsmap) trained on
tests/fixtures/texts/ppl-en.txt and the first 50 strings of tests/fixtures/tokenizer/corpus.json,
turned into a ``tokenizer.json`` in exactly the shape of XLM-R's / BGE-M3's: ``Precompiled`` +
``Replace(" {2,}", " ")`` normalizer, ``WhitespaceSplit`` + ``Metaspace`` pre-tokenizer, a
``Unigram`` model with fairseq's id layout (``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, the
pieces, ``<mask>`` last) and ``<s> $A </s>`` / ``<s> $A </s> </s> $B </s>`` templates (what
transformers' ``XLMRobertaConverter`` builds; the charsmap is read from the model proto here,
without protobuf).

The models: 2 layers, hidden 32, 4 heads, MLP 64, ``max_position_embeddings`` 66 (positions
start at ``pad_token_id + 1`` = 2, so 64 tokens), one token type, exact GELU; random weights
(LayerNorm gains and biases random too).

References, all float32:
* ``xlmr-tiny/tokenizer_refs.json``: ids of the ``tokenizers`` package (``Tokenizer.from_file``)
  for every corpus string and test text, without and with special tokens, and for pairs; the
  script checks transformers' ``AutoTokenizer`` gives the same ids;
* ``xlmr-tiny/reference.json`` + ``.npy``: per text the input ids (truncated to
  ``max_seq_length`` 24), ``last_hidden_state`` rows (``hidden.npy``), and the
  ``SentenceTransformer.encode`` output (CLS pooling + Normalize, ``embeddings.npy``) and with
  ``prompt_name="query"`` (``embeddings_query.npy``);
* ``xlmr-cross-encoder/reference.json``: per (query, document) pair its ids (``longest_first``
  to 40 tokens), the classifier logit of a one-pair run and ``CrossEncoder.predict`` score, and
  ``CrossEncoder.rank``'s order.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_xlmr.py
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import sentence_transformers
import sentencepiece as spm
import tokenizers
import torch
import transformers
from sentence_transformers import CrossEncoder, models
from st_fixture import embedding_references, folder_size, randomize, save_sentence_transformer
from tokenizers import Regex, normalizers, pre_tokenizers, processors, decoders
from tokenizers.models import Unigram
from transformers import (AutoTokenizer, XLMRobertaConfig, XLMRobertaForSequenceClassification,
                          XLMRobertaModel, XLMRobertaTokenizer)

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
OUT = FIX / "xlmr-tiny"
OUT_CE = FIX / "xlmr-cross-encoder"
MAX_SEQ = 24
MAX_PAIR = 40
PIECES = 1000

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "",
    "   ",
    "Café naïve résumé — Größe!",
    "你好，世界",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "ﬁ ﬂ ligatures and full-width ＡＢＣ１２３",
    "multiple   spaces    between\twords\nand lines",
    "This text is long enough that the twenty-four token limit of the tiny model cuts it off "
    "somewhere in the middle of the second half of the sentence.",
    "<mask> in the text, and a <pad> too",
    "🤗 emoji 👨‍👩‍👧 สวัสดี",
]
QUERY = "what is the capital of france?"
DOCS = [
    "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "Berlin is the capital of Germany; Paris is the capital of France, and this document is "
    "long enough that the forty-token limit of the tiny model cuts it somewhere in the middle.",
    "Café naïve résumé — Größe!",
    "Париж — столица Франции.",
]
PAIRS = [
    ("what is the answer?", "the answer is forty two."),
    ("", "only the second text"),
    ("你好", "世界"),
]


def proto_field(buf: bytes, number: int) -> bytes | None:
    """The first length-delimited field `number` of a protobuf message (no protobuf package)."""
    i = 0

    def varint() -> int:
        nonlocal i
        shift = value = 0
        while True:
            b = buf[i]
            i += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    while i < len(buf):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            n = varint()
            if field == number:
                return buf[i:i + n]
            i += n
        else:
            raise ValueError(f"wire type {wire}")
    return None


def train_unigram() -> tuple[list[tuple[str, float]], bytes]:
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    lines = [l for l in (FIX / "texts" / "ppl-en.txt").read_text().splitlines() if l.strip()]
    lines += corpus[:50]
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=proto, vocab_size=PIECES,
        model_type="unigram", normalization_rule_name="nmt_nfkc", character_coverage=0.9995,
        hard_vocab_limit=False, minloglevel=2,
    )
    model = proto.getvalue()
    sp = spm.SentencePieceProcessor(model_proto=model)
    # ModelProto.normalizer_spec (3) → NormalizerSpec.precompiled_charsmap (2).
    charsmap = proto_field(proto_field(model, 3), 2)
    assert charsmap, "no precompiled charsmap"
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    assert [p for p, _ in pieces[:3]] == ["<unk>", "<s>", "</s>"], pieces[:3]
    vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    vocab += pieces[3:] + [("<mask>", 0.0)]
    return vocab, charsmap


def build_tokenizer(dst: Path) -> tokenizers.Tokenizer:
    vocab, charsmap = train_unigram()
    tok = tokenizers.Tokenizer(Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([
        normalizers.Precompiled(charsmap),
        normalizers.Replace(Regex(" {2,}"), " "),
    ])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"),
    ])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens([
        tokenizers.AddedToken(t, special=True, normalized=False) for t in
        ["<s>", "<pad>", "</s>", "<unk>"]])
    tok.add_special_tokens([
        tokenizers.AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    hf = XLMRobertaTokenizer(tokenizer_object=tok, model_max_length=MAX_PAIR)
    hf.save_pretrained(str(dst))
    return tok


def randomize_xlmr(model: torch.nn.Module) -> None:
    randomize(model, lambda name: "LayerNorm.weight" in name)


def config(vocab: int, **extra) -> XLMRobertaConfig:
    return XLMRobertaConfig(
        vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, hidden_act="gelu",
        initializer_range=0.2, pad_token_id=1, bos_token_id=0, eos_token_id=2, **extra)


def tokenizer_refs(folder: Path) -> dict:
    tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(str(folder))
    corpus = json.loads((FIX / "tokenizer" / "corpus.json").read_text())
    cases = []
    for t in corpus + TEXTS:
        plain = tok.encode(t, add_special_tokens=False).ids
        full = tok.encode(t).ids
        assert auto(t, add_special_tokens=False)["input_ids"] == plain, t
        assert auto(t)["input_ids"] == full, t
        cases.append({"text": t, "ids": plain, "with_specials": full})
    pairs = []
    for a, b in PAIRS:
        e = tok.encode(a, b)
        assert auto([a], [b])["input_ids"][0] == e.ids, (a, b)
        pairs.append({"a": a, "b": b, "ids": e.ids, "type_ids": e.type_ids})
    return {"tokenizers": tokenizers.__version__, "cases": cases, "pairs": pairs}


def make_embedder(tok_dir: Path, vocab: int) -> None:
    hf = OUT / "hf"
    shutil.copytree(tok_dir, hf)
    torch.manual_seed(22)
    model = XLMRobertaModel(config(vocab), add_pooling_layer=False).eval()
    randomize_xlmr(model)
    model.save_pretrained(hf, safe_serialization=True)
    save_sentence_transformer(
        OUT, MAX_SEQ, [models.Pooling(32, pooling_mode="cls"), models.Normalize()],
        {"query": "query: ", "passage": "passage: "})
    embedding_references(OUT, TEXTS, MAX_SEQ, 5, ["query"])


def make_cross_encoder(tok_dir: Path, vocab: int) -> None:
    hf = OUT_CE / "hf"
    shutil.copytree(tok_dir, hf)
    torch.manual_seed(23)
    model = XLMRobertaForSequenceClassification(config(vocab, num_labels=1)).eval()
    randomize_xlmr(model)
    model.save_pretrained(hf, safe_serialization=True)
    CrossEncoder(str(hf), max_length=MAX_PAIR, device="cpu").save(
        str(OUT_CE), safe_serialization=True)
    shutil.rmtree(hf)
    (OUT_CE / "README.md").unlink(missing_ok=True)

    ce = CrossEncoder(str(OUT_CE), device="cpu")
    tok = AutoTokenizer.from_pretrained(str(OUT_CE))
    model = XLMRobertaForSequenceClassification.from_pretrained(str(OUT_CE)).eval()
    refs = {
        "transformers": transformers.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_length": MAX_PAIR,
        "query": QUERY,
        "pairs": [],
    }
    scores = ce.predict([(QUERY, d) for d in DOCS], batch_size=4).tolist()
    with torch.no_grad():
        for i, d in enumerate(DOCS):
            enc = tok([QUERY], [d], truncation="longest_first", max_length=MAX_PAIR,
                      return_tensors="pt")
            refs["pairs"].append({
                "document": d,
                "ids": enc["input_ids"][0].tolist(),
                "type_ids": [0] * enc["input_ids"].shape[1],
                "logit": model(**enc).logits[0, 0].item(),
                "score": scores[i],
            })
    refs["rank"] = [r["corpus_id"] for r in ce.rank(QUERY, DOCS)]
    (OUT_CE / "reference.json").write_text(
        json.dumps(refs, ensure_ascii=False, indent=1) + "\n")


def main() -> None:
    for d in (OUT, OUT_CE):
        if d.exists():
            shutil.rmtree(d)
    OUT.mkdir(parents=True)
    tok_dir = OUT / "tok"
    build_tokenizer(tok_dir)
    vocab = tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json")).get_vocab_size()
    make_embedder(tok_dir, vocab)
    make_cross_encoder(tok_dir, vocab)
    refs = tokenizer_refs(OUT)
    shutil.rmtree(tok_dir)
    (OUT / "tokenizer_refs.json").write_text(
        json.dumps(refs, ensure_ascii=False, indent=1) + "\n")
    for d in (OUT, OUT_CE):
        print(f"wrote {d} ({folder_size(d)} bytes, vocab {vocab})")


if __name__ == "__main__":
    main()
