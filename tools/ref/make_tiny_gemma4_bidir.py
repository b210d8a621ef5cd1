#!/usr/bin/env python3
"""The tiny multimodal Gemma 4 checkpoint of make_tiny_gemma4_mm.py with the text config of the
larger checkpoints, `use_bidirectional_attention: "vision"`, and its transformers 5 float32
references.

transformers (`create_masks_for_vision_model`) then gives the sliding layers the mask
AND(sliding window, OR(causal, same vision group)): a group is a run of consecutive image (or
video) placeholder tokens (mm_token_type_ids 1 or 2; the <|image> and <image|> markers are text),
so an image token also sees the later tokens of its own image, while keys further back than the
window stay hidden; full-attention layers stay causal, and so do decode steps.

Writes tests/fixtures/tiny_gemma4_bidir/ with the files make_tiny_gemma4_mm.py describes, for a
checkpoint without the audio tower (as the larger checkpoints have none): the same two images in
one prompt (64 and 63 soft tokens, the sliding window 8), and in reference.json
`causal_logits_max_diff`: how far the prompt's logits under the plain causal mask lie from the
bidirectional ones (checked to be large, so the fixture exercises the mask).

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4_bidir.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_gemma4_mm import configs, make  # noqa: E402
from tiny_ref import FIXTURES  # noqa: E402

OUT = FIXTURES / "tiny_gemma4_bidir"
# The causal logits must differ from the bidirectional ones by more than this (the tests'
# tolerance is 1e-4).
MIN_CAUSAL_DIFF = 0.05


@torch.no_grad()
def main() -> None:
    cfg = configs(use_bidirectional_attention="vision", audio=False)
    # The images of make_tiny_gemma4_mm.py (made there with ImageMagick).
    made = make(OUT, cfg, images_from=FIXTURES / "tiny_gemma4_mm")
    model, ref = made["model"], made["ref"]
    text = model.config.get_text_config()
    assert text.use_bidirectional_attention == "vision"
    soft = [v["soft_tokens"] for v in ref["images"].values()]
    assert len(soft) >= 2, "the prompt should hold two images"
    assert "sliding_attention" in text.layer_types
    assert text.sliding_window < min(soft), (
        f"the sliding window {text.sliding_window} should be shorter than an image "
        f"({min(soft)} soft tokens)")
    # Without mm_token_type_ids transformers masks causally (the placeholders still come from
    # the ids): the fixture must tell the two apart.
    kwargs = dict(made["kwargs"], mm_token_type_ids=None)
    causal = model(input_ids=made["input_ids"], use_cache=False, **kwargs).logits[0].float()
    diff = float((causal - made["logits"]).abs().max())
    print(f"causal vs bidirectional logits: max diff {diff:.4f}")
    assert diff > MIN_CAUSAL_DIFF, f"the bidirectional mask changes the logits by {diff} only"
    # Rows before the first image are the same under both masks.
    first = made["input_ids"][0].tolist().index(model.config.image_token_id)
    before = float((causal[:first] - made["logits"][:first]).abs().max())
    assert before <= 1e-6, f"rows before the first image differ by {before}"
    r = json.loads((OUT / "reference.json").read_text())
    r["causal_logits_max_diff"] = diff
    (OUT / "reference.json").write_text(json.dumps(r, indent=1) + "\n")


if __name__ == "__main__":
    main()
