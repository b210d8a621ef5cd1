#!/usr/bin/env python3
"""Scores of the tiny Qwen3-Reranker fixture (tests/fixtures/qwen3-reranker-tiny) with an
instruction of the caller's own, as the model card computes them (its ``format_instruction``
with ``instruction`` set): ``reference_instruction.json`` next to the fixture's
``reference.json``, with per document the input ids of a one-by-one run, its "yes" and "no"
logits, and the score from the card's left-padded batch of all documents.

First the card's scores with the default instruction are recomputed and checked against
reference.json, so the two files come from the same computation.

Run with the reference venv:
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/ref_qwen3_reranker_instruction.py
"""

from __future__ import annotations

import json

import transformers
from make_tiny_qwen3_reranker import DOCS, OUT, QUERY, CardScorer, format_instruction
from st_fixture import write_json

INSTRUCTION = "Given a question about geography, find the passage that states the answer"


def main() -> None:
    card = CardScorer(OUT)
    known = json.loads((OUT / "reference.json").read_text())
    scores, _, _ = card.compute_logits(card.process_inputs(
        [format_instruction(None, QUERY, d) for d in DOCS]))
    for s, d in zip(scores, known["documents"]):
        assert abs(s - d["score"]) <= 1e-6, (s, d["score"])

    pairs = [format_instruction(INSTRUCTION, QUERY, d) for d in DOCS]
    scores, _, _ = card.compute_logits(card.process_inputs(pairs))
    refs = {"transformers": transformers.__version__, "instruction": INSTRUCTION,
            "query": QUERY, "documents": []}
    for pair, doc, score in zip(pairs, DOCS, scores):
        one = card.process_inputs([pair])
        _, no, yes = card.compute_logits(one)
        refs["documents"].append({"document": doc, "ids": one["input_ids"][0].tolist(),
                                  "no_logit": no[0], "yes_logit": yes[0], "score": score})
    write_json(OUT / "reference_instruction.json", refs)
    print(f"wrote {OUT / 'reference_instruction.json'}: scores {[round(s, 4) for s in scores]}, "
          f"default-instruction scores {[round(d['score'], 4) for d in known['documents']]}")


if __name__ == "__main__":
    main()
