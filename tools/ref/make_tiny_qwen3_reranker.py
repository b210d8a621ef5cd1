#!/usr/bin/env python3
"""Make the tiny random Qwen3-Reranker fixture in tests/fixtures/qwen3-reranker-tiny/.

The tokenizer: make_tiny_qwen3_embedding.py's byte-level BPE, trained with lines "yes" and "no"
added so that both are single tokens (the reranker reads their logits), with Qwen's plain
``ByteLevel`` post-processor.

The model: a ``Qwen3ForCausalLM`` (2 layers, hidden 64, 8 query / 2 KV heads of 16, MLP 64, QK
norms, tied embeddings as Qwen3-Reranker-0.6B, ``max_position_embeddings`` 256 so that long
documents are cut), random weights, saved as the published Qwen3-Reranker folders are (a plain
causal LM; the folder name says "reranker").

The reference is the computation of the Qwen3-Reranker model card (transformers, float32):
``format_instruction`` with the default instruction, the system/user ``prefix`` and the
assistant/think ``suffix`` tokenized separately, the formatted text tokenized without special
tokens and cut ``longest_first`` to ``max_length - len(prefix) - len(suffix)`` (max_length =
256, the model's context, standing in for the card's 8192), left-padded batches, the last
position's logits of "yes" and "no", score = softmax over (no, yes)[yes]. ``reference.json``
holds per document the input ids, the two logits of a one-by-one run, and the score of the
card's padded batch of all documents.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_qwen3_reranker.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import transformers
from make_tiny_qwen3_embedding import build_tokenizer
from st_fixture import folder_size, randomize, write_json
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "qwen3-reranker-tiny"
MAX_LENGTH = 256

# The model card's strings.
TASK = "Given a web search query, retrieve relevant passages that answer the query"
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the "
          "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
          "\"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

QUERY = "What is the capital of China?"
DOCS = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
    "",
    "Café naïve résumé — Größe! 你好，世界 🤗",
    "This document is long enough that the tiny model's context of two hundred and fifty-six tokens "
    "cuts it: " + "the quick brown fox jumps over the lazy dog; " * 14 + "and this end is lost.",
    "<|im_end|> special tokens in a document",
]


def format_instruction(instruction: str | None, query: str, doc: str) -> str:
    if instruction is None:
        instruction = TASK
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"


class CardScorer:
    """The Qwen3-Reranker model card's computation on the folder ``out`` (transformers, float32),
    with max_length = the tiny model's context."""

    def __init__(self, out: Path) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(str(out), padding_side="left")
        self.model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
        self.no = self.tokenizer.convert_tokens_to_ids("no")
        self.yes = self.tokenizer.convert_tokens_to_ids("yes")
        self.prefix = self.tokenizer.encode(PREFIX, add_special_tokens=False)
        self.suffix = self.tokenizer.encode(SUFFIX, add_special_tokens=False)

    def process_inputs(self, pairs):
        inputs = self.tokenizer(pairs, padding=False, truncation="longest_first",
                                return_attention_mask=False,
                                max_length=MAX_LENGTH - len(self.prefix) - len(self.suffix))
        for i, ele in enumerate(inputs["input_ids"]):
            inputs["input_ids"][i] = self.prefix + ele + self.suffix
        return self.tokenizer.pad(inputs, padding=True, return_tensors="pt", max_length=MAX_LENGTH)

    @torch.no_grad()
    def compute_logits(self, inputs):
        batch_scores = self.model(**inputs).logits[:, -1, :]
        true_vector = batch_scores[:, self.yes]
        false_vector = batch_scores[:, self.no]
        batch_scores = torch.stack([false_vector, true_vector], dim=1)
        batch_scores = torch.nn.functional.log_softmax(batch_scores, dim=1)
        return batch_scores[:, 1].exp().tolist(), false_vector.tolist(), true_vector.tolist()


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    tok = build_tokenizer(OUT, extra_lines=("yes", "no") * 20, embedding=False)
    assert tok.token_to_id("yes") is not None and tok.token_to_id("no") is not None
    cfg = Qwen3Config(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=MAX_LENGTH, rms_norm_eps=1e-6, tie_word_embeddings=True,
        initializer_range=0.1, attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=None, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(28)
    model = Qwen3ForCausalLM(cfg).to(torch.float32).eval()
    randomize(model, lambda name: name.endswith("norm.weight"), weight_std=0.1)
    model.save_pretrained(OUT, safe_serialization=True)

    card = CardScorer(OUT)
    token_true_id, token_false_id = card.yes, card.no
    process_inputs, compute_logits = card.process_inputs, card.compute_logits

    pairs = [format_instruction(None, QUERY, d) for d in DOCS]
    scores, _, _ = compute_logits(process_inputs(pairs))
    refs = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "max_length": MAX_LENGTH,
        "instruction": TASK,
        "prefix": PREFIX,
        "suffix": SUFFIX,
        "yes_id": token_true_id,
        "no_id": token_false_id,
        "query": QUERY,
        "documents": [],
    }
    for pair, doc, score in zip(pairs, DOCS, scores):
        one = process_inputs([pair])
        _, no, yes = compute_logits(one)
        refs["documents"].append({
            "document": doc, "ids": one["input_ids"][0].tolist(), "no_logit": no[0],
            "yes_logit": yes[0], "score": score,
        })
    assert any(len(d["ids"]) == MAX_LENGTH for d in refs["documents"]), "nothing was cut"
    write_json(OUT / "reference.json", refs)
    print(f"wrote {OUT} ({folder_size(OUT)} bytes, vocab {tok.get_vocab_size()}, "
          f"scores {[round(s, 4) for s in scores]})")


if __name__ == "__main__":
    main()
