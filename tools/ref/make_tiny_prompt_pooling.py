#!/usr/bin/env python3
"""Make the tiny sentence-transformers fixture whose pooling leaves the prompt out, in
tests/fixtures/bert-prompt-pooling/.

Some embedding models (INSTRUCTOR-style ones) pool only the text's tokens: their
``1_Pooling/config.json`` says ``include_prompt: false`` and sentence-transformers masks the
prompt's tokens (``prompt_length``: the prompt tokenized alone with its special tokens, less a
final special token; so ``[CLS]`` and the prompt, not ``[SEP]``) before pooling. The model: the
tiny random BERT of tests/fixtures/bert-tiny (its Transformer module re-read, max_seq_length 24)
→ Pooling with every mode at once (cls, max, mean, mean_sqrt_len_tokens, weightedmean,
lasttoken: 6 × 32 features), ``include_prompt=False`` → Normalize, with two prompts: a short
``query: `` and a long one (8 tokens with ``[CLS]``), so a text cut at 24 tokens keeps little.

References: ``embedding_references`` of st_fixture.py: ids, hidden states, and ``encode`` of the
texts in padded batches of 3 without a prompt and with each prompt (``embeddings.npy``,
``embeddings_query.npy``, ``embeddings_passage.npy``).

Run with the reference venv (needs the bert-tiny fixture):
    /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_prompt_pooling.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sentence_transformers import models
from st_fixture import embedding_references, folder_size, save_sentence_transformer, write_json

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "tests" / "fixtures" / "bert-tiny"
OUT = REPO / "tests" / "fixtures" / "bert-prompt-pooling"
MAX_SEQ = 24
MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
PROMPTS = {"query": "query: ", "passage": "represent this passage for retrieval: "}

TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "",
    "Café naïve résumé — Größe!",
    "This text is long enough that the twenty-four token limit of the tiny model cuts it off "
    "somewhere in the middle of the second half of the sentence.",
]


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    save_sentence_transformer(
        OUT, MAX_SEQ, [models.Pooling(32, pooling_mode=MODES, include_prompt=False),
                       models.Normalize()], PROMPTS, src=SRC)
    refs = embedding_references(OUT, TEXTS, MAX_SEQ, 3, list(PROMPTS),
                                extra={"pooling_modes": list(MODES), "include_prompt": False})
    write_json(OUT / "reference.json", refs)
    print(f"wrote {OUT} ({folder_size(OUT)} bytes)")


if __name__ == "__main__":
    main()
