#!/usr/bin/env python3
"""Converts a GGUF model to a bf16 HuggingFace safetensors folder (for the README's bf16 / Q8 /
Q4 table: the real models at hand ship as GGUF only). transformers dequantizes the GGUF
(`from_pretrained(..., gguf_file=...)`), the weights are cast to bfloat16 and saved with the
tokenizer. The output is written outside the repository and never committed.

  /root/.cache/oxinfer/refvenv/bin/python tools/ref/gguf_to_bf16_safetensors.py MODEL.gguf OUT_DIR
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

src, out = Path(sys.argv[1]), Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
# save_pretrained refuses GGUF-loaded models: write the state dict and config ourselves.
sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
if model.config.tie_word_embeddings:
    sd.pop("lm_head.weight", None)
save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
cfg = model.config
if hasattr(cfg, "quantization_config"):
    del cfg.quantization_config
cfg.dtype = "bfloat16"
# GGUF-loaded configs lack `architectures`, which llama.cpp's converter needs to read the folder.
cfg.architectures = [type(model).__name__]
cfg.save_pretrained(out)
tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
tok.save_pretrained(out)
print("wrote", out)
