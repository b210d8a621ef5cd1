"""What every tools/ref/make_tiny_*.py generator shares: transformers references for a tiny random
checkpoint (logits, greedy continuations with and without the KV cache, seeded prompts with safe
greedy margins), publishing the checkpoint folder, checking feature probes and the command line.

The generators keep what differs per architecture (building the model, hub spellings, GGUF twins,
feature probes); everything here is seeded, so the fixtures stay byte-identical when re-run.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import safetensors
import torch
import transformers

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"

# Shared by every tiny checkpoint: a byte-sized vocabulary, 32 greedy steps whose top-1/top-2 logit
# gap is at least MIN_MARGIN, and two prompts (short, long).
VOCAB = 260
N_GREEDY = 32
MIN_MARGIN = 5e-3
PROMPT_LENGTHS = {"short": 12, "long": 110}


@torch.no_grad()
def logits_of(model, ids: list[int]) -> torch.Tensor:
    """float32 logits [len(ids), vocab] of one uncached forward pass."""
    return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], float, list[float]]:
    """Greedy continuation, recomputing the whole sequence each step (no cache)."""
    seq = list(ids)
    out, margins = [], []
    for _ in range(n):
        last = logits_of(model, seq)[-1]
        top = torch.topk(last, 2)
        margins.append(float(top.values[0] - top.values[1]))
        tok = int(top.indices[0])
        out.append(tok)
        seq.append(tok)
    return out, min(margins), margins


@torch.no_grad()
def greedy_cached(model, ids: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy continuation with transformers' KV cache (prefill, then one token per step)."""
    out_ = model(input_ids=torch.tensor([ids]), use_cache=True)
    cache = out_.past_key_values
    last = out_.logits[0, -1]
    toks, lasts = [], []
    for _ in range(n):
        lasts.append(last.clone())
        tok = int(torch.argmax(last))
        toks.append(tok)
        out_ = model(input_ids=torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
        cache = out_.past_key_values
        last = out_.logits[0, -1]
    return toks, lasts


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def pick_prompt(model, length: int, seed: int, *, low: int = 0, bos: int | None = None,
                min_distinct: int = 8) -> tuple[list[int], int, list[int], float]:
    """Seeded random prompt of ids in [low, VOCAB) (first id `bos` when given); bumps the seed until
    the greedy margins are at least MIN_MARGIN and the continuation has `min_distinct` tokens.
    Returns (ids, seed used, greedy ids, smallest margin)."""
    for k in range(200):
        rng = np.random.default_rng(seed + k)
        ids = [int(x) for x in rng.integers(low, VOCAB, size=length)]
        if bos is not None:
            ids[0] = bos
        toks, margin, _ = greedy(model, ids, N_GREEDY)
        if margin >= MIN_MARGIN and len(set(toks)) >= min_distinct:
            return ids, seed + k, toks, margin
    raise RuntimeError("no prompt with a large enough greedy margin")


def prompt_references(ref, out: Path, seed: int, pick: Callable, abs_max_key: str | None = None,
                      cache_label: str = "cached-vs-full") -> tuple[list[dict], dict[str, np.ndarray]]:
    """For each of PROMPT_LENGTHS: pick a prompt with `pick(model, length, seed)`, save its logits
    as out/logits_<name>.npy (float32 [n_prompt, vocab]), check the cached greedy run against the
    uncached one, and return the reference.json prompt entries plus the logits by prompt name.
    `abs_max_key` names an optional entry recording max |logit|."""
    prompts, logits = [], {}
    for k, (pname, length) in enumerate(PROMPT_LENGTHS.items()):
        ids, pseed, toks, margin = pick(ref, length, seed * 10 + 1000 * k)
        lg = logits_of(ref, ids).numpy().astype(np.float32)
        np.save(out / f"logits_{pname}.npy", lg)
        logits[pname] = lg
        ctoks, clasts = greedy_cached(ref, ids, N_GREEDY)
        assert ctoks == toks, "cached and uncached greedy disagree"
        # cached-decode logits vs full recompute at each generated position
        full = logits_of(ref, ids + toks[:-1])[len(ids) - 1:]
        cache_diff = max(max_diff(c, f) for c, f in zip(clasts, full))
        entry = {
            "name": pname, "prompt_seed": pseed, "ids": ids, "greedy_ids": toks,
            "min_greedy_margin": margin, "n_distinct_greedy": len(set(toks)),
            "logits_file": f"logits_{pname}.npy", "logits_shape": list(lg.shape),
        }
        if abs_max_key:
            entry[abs_max_key] = float(np.abs(lg).max())
        entry["transformers_cached_decode_max_abs_diff"] = cache_diff
        prompts.append(entry)
        print(f"{pname}: {len(ids)} ids, greedy {toks[:8]}..., min margin {margin:.4g}, "
              f"|logits| max {np.abs(lg).max():.3g}, {cache_label} {cache_diff:.2g}", flush=True)
    return prompts, logits


def check_features(checks: dict[str, float], min_change: float, unchecked: tuple[str, ...] = ()) -> None:
    """Feature probes: `*identity` rebuilds must leave the logits alone (< 1e-5), every other
    change must move them by more than `min_change` (names in `unchecked` are only printed)."""
    for k, v in checks.items():
        print(f"feature check {k}: {v:.4g}", flush=True)
    for k, v in checks.items():
        if k.endswith("identity"):
            assert v < 1e-5, (k, v)
        elif k not in unchecked:
            assert v > min_change, (k, v)


def publish(out: Path, save: Callable[[Path], None]) -> None:
    """Let `save(tmp)` write a checkpoint into a temporary folder, then replace `out` with it
    (folder 0755, files 0644)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        save(tmp)
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(tmp, out)
    out.chmod(0o755)
    for f in out.iterdir():
        f.chmod(0o644)


def report_size(out: Path) -> None:
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{out.relative_to(REPO)}: {size / 1024:.0f} KiB, files {sorted(p.name for p in out.iterdir())}",
          flush=True)


def versions() -> dict:
    import gguf
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
    }


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(name)
    except Exception:
        return None


def run_variants(doc: str, variants: dict, make: Callable, llamacpp_flag: bool, threads: int = 2) -> None:
    """Command line shared by the generators: `[--variant NAME]... [--no-llamacpp]`, then
    `make(name, spec[, use_llamacpp])` for each chosen variant (all by default)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variant", action="append", choices=sorted(variants))
    if llamacpp_flag:
        ap.add_argument("--no-llamacpp", action="store_true", help="skip the llama.cpp cross-check")
    args = ap.parse_args()
    torch.set_num_threads(threads)
    for name in args.variant or sorted(variants):
        if llamacpp_flag:
            make(name, variants[name], not args.no_llamacpp)
        else:
            make(name, variants[name])
