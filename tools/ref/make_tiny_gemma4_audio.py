#!/usr/bin/env python3
"""transformers 5 float32 references of the audio side of tests/fixtures/tiny_gemma4_mm (the
checkpoint made by make_tiny_gemma4_mm.py, whose audio tower this script does not change).

Adds to tests/fixtures/tiny_gemma4_mm/:
  processor_config.json      {"feature_extractor": ...}: Gemma4AudioFeatureExtractor's settings
                             with 8 mel bins (the tiny tower's first subsampling conv has 8
                             channels, and its input projection reads (8 // 4) · 4 values, so the
                             mel axis must shrink 8 → 4 → 2), transformers' defaults otherwise
                             (16 kHz, 20 ms Hann frames every 10 ms, 512-point FFT, HTK mel,
                             log(mel + 0.001), 128-sample padding, 30 s cap).
  speech.wav                 espeak-ng "the quick brown fox", resampled to 16 kHz 16-bit mono by
                             sox, cut to 23190 samples: padded to 23296 (a multiple of 128), that
                             makes 145 frames of which the last (an even index) overlaps the
                             padding, so the extractor's and both subsampling layers' masks drop
                             a row (36 of 37 soft tokens valid).
  mel_speech.npy             float32 [frames, 8]: the extractor's input_features (frames past the
                             audio zeroed, as the extractor's mask does).
  audio_tower_speech.npy     float32 [soft tokens, 24]: the audio tower's last_hidden_state
                             (conformer + output_proj), padding rows dropped.
  audio_speech.npy           float32 [soft tokens, 32]: get_audio_features (tower + embed_audio).
  logits_audio.npy           float32 [n_prompt, vocab]: logits of a text + audio chat prompt.
  reference_audio.json       versions, extractor settings, sample / frame / soft-token counts,
                             the chat template text, the prompt ids (audio placeholders expanded
                             as Gemma4Processor.replace_audio_token does), 32 greedy ids
                             (transformers generate, KV cache) and their smallest margin.

Run after make_tiny_gemma4_mm.py (which rebuilds the folder), from the repository root:
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4_audio.py
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np
import torch

from transformers import AutoTokenizer, Gemma4ForConditionalGeneration
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny_ref import FIXTURES, MIN_MARGIN, N_GREEDY, versions  # noqa: E402

OUT = FIXTURES / "tiny_gemma4_mm"
N_MEL = 8
SPEECH = "the quick brown fox"
N_SAMPLES = 23190
QUESTIONS = ["What was said?", "Say it.", "Repeat.", "Hm?", "Which words?", "Tell me.", "Why?"]


def make_speech(path: Path) -> None:
    """espeak-ng's voice, resampled to 16 kHz 16-bit mono by sox."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        subprocess.run(["espeak-ng", "-w", str(raw), SPEECH], check=True)
        subprocess.run(["sox", str(raw), "-r", "16000", "-b", "16", "-c", "1", str(path)],
                       check=True)
    with wave.open(str(path)) as w:
        params, pcm = w.getparams(), w.readframes(N_SAMPLES)
    assert len(pcm) == 2 * N_SAMPLES, "espeak-ng's clip is shorter than N_SAMPLES"
    with wave.open(str(path), "wb") as w:
        w.setparams(params)
        w.writeframes(pcm)


def read_wav(path: Path) -> np.ndarray:
    """16-bit PCM as float32 in [-1, 1) (sample / 32768, as the engine's WAV decoder reads it)."""
    with wave.open(str(path)) as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768


def expand_audio(ids: list[int], audio_id: int, boa: int, eoa: int, n: int) -> list[int]:
    """The template's one audio marker → boa, n placeholders, eoa."""
    out = []
    for i in ids:
        out += [boa] + [audio_id] * n + [eoa] if i == audio_id else [i]
    return out


@torch.no_grad()
def main() -> None:
    speech = OUT / "speech.wav"
    make_speech(speech)
    x = read_wav(speech)
    fe = Gemma4AudioFeatureExtractor(feature_size=N_MEL)
    settings = {k: (float(v) if isinstance(v, np.ndarray) else v) for k, v in fe.to_dict().items()}
    (OUT / "processor_config.json").write_text(
        json.dumps({"feature_extractor": settings}, indent=1) + "\n")

    feats = fe([x], return_tensors="pt")
    mel, mask = feats["input_features"], feats["input_features_mask"]
    np.save(OUT / "mel_speech.npy", mel[0].numpy().astype(np.float32))

    model = Gemma4ForConditionalGeneration.from_pretrained(
        OUT, dtype=torch.float32, attn_implementation="eager").eval()
    cfg = model.config
    tower = model.model.audio_tower(mel, mask, return_dict=True)
    valid = tower.attention_mask[0]
    np.save(OUT / "audio_tower_speech.npy",
            tower.last_hidden_state[0][valid].numpy().astype(np.float32))
    soft = model.model.get_audio_features(mel, mask, return_dict=True)
    rows = soft.pooler_output[0][soft.attention_mask[0]]
    np.save(OUT / "audio_speech.npy", rows.numpy().astype(np.float32))
    n_soft = int(rows.shape[0])

    tok = AutoTokenizer.from_pretrained(OUT)
    template = (OUT / "chat_template.jinja").read_text()
    audio_id, boa, eoa = cfg.audio_token_id, cfg.boa_token_id, cfg.eoa_token_index
    for question in QUESTIONS:
        messages = [{"role": "user", "content": [
            {"type": "audio"}, {"type": "text", "text": question}]}]
        text = tok.apply_chat_template(messages, chat_template=template, tokenize=False,
                                       add_generation_prompt=True)
        ids = expand_audio(tok.encode(text, add_special_tokens=False), audio_id, boa, eoa, n_soft)
        input_ids = torch.tensor([ids])
        kwargs = dict(input_features=mel, input_features_mask=mask)
        gen = model.generate(input_ids=input_ids, max_new_tokens=N_GREEDY, do_sample=False,
                             output_logits=True, return_dict_in_generate=True, **kwargs)
        greedy = gen.sequences[0, len(ids):].tolist()
        margins = [float(v[0] - v[1]) for v in (torch.topk(l[0], 2).values for l in gen.logits)]
        if len(greedy) < N_GREEDY:
            print(f"{question!r}: stops after {len(greedy)} tokens")
            continue
        print(f"{question!r}: min margin {min(margins):.4f}, {len(set(greedy))} distinct")
        if min(margins) >= MIN_MARGIN and len(set(greedy)) >= 8:
            break
    else:
        raise SystemExit("no question gives safe greedy margins")
    logits = model(input_ids=input_ids, use_cache=False, **kwargs).logits[0].float()
    np.save(OUT / "logits_audio.npy", logits.numpy().astype(np.float32))
    ref = {
        "versions": versions(),
        "feature_extractor": settings,
        "speech": {"text": SPEECH, "samples": int(x.shape[0]), "frames": int(mel.shape[1]),
                   "valid_frames": int(mask[0].sum()), "soft_tokens": n_soft},
        "question": question,
        "chat_template_text": text,
        "prompt_ids": ids,
        "greedy_ids": greedy,
        "min_greedy_margin": min(margins),
        "logits_abs_max": float(logits.abs().max()),
    }
    (OUT / "reference_audio.json").write_text(json.dumps(ref, indent=1) + "\n")
    print(f"{OUT}: {x.shape[0]} samples, {mel.shape[1]} frames, {n_soft} soft tokens; prompt "
          f"{len(ids)} ids; greedy {greedy}")


if __name__ == "__main__":
    main()
