#!/usr/bin/env python3
"""A tiny random Gemma 4 assistant (drafter) for tests/fixtures/gemma4-tiny-dense, and references.

Writes tests/fixtures/gemma4-assistant-tiny/:
  config.json, model.safetensors   Gemma4AssistantForCausalLM (transformers `gemma4_assistant`):
                     backbone_hidden_size 32 (the target's), a 2-layer Gemma 4 text model of hidden
                     16 whose layers [S F] read the target's shared KV (last sliding layer 3: 2 kv
                     heads x 8, last full layer 4: 1 kv head x 16), window 5, ordered embeddings
                     (13 centroids of 20 tokens, top 4), tied head, vocab 260. Random weights,
                     then 300 Adam steps toward the target's greedy tokens (`distill`), so that
                     some drafts are accepted.
  reference.json     versions, seed, prompt, plain greedy ids, assisted ids, and per drafting round
                     of transformers' assisted generation: the context length, the draft ids
                     transformers' candidate generator made and the ids of the clean recomputation
                     (see below), whether the two agree.
  logits_rounds.npy  float32 [rounds, draft, vocab]: the clean recomputation's draft logits.
  logits_generate.npy float32 [rounds, draft, vocab]: the candidate logits generate() produced.
  logits_rounds_f64.npy the clean recomputation in float64 (stored as float32).

Drafting semantics (transformers 5.24 SinglePositionMultiTokenCandidateGenerator): with p + 1
tokens known (the last, token p, not yet run by the target), the drafter's input is
concat(target scaled embedding of token p, target final-normed hidden state at position p - 1),
its position id is p, and its layers attend to the target's shared K/V: full layers to every
position < p, sliding layers to the last window + 1 positions < p (the bidirectional window
mask |q - k| <= window, flipped). Each drafted token's argmax and post-projected hidden state
feed the next draft step at the same position.

transformers' own generate() hands the drafter K/V states that can hold more than that: after a
round with a rejected draft, the verify pass's key of the first rejected draft token (at position
p) stays in the full-attention states, and once the target's sliding cache has dropped old
positions, the sliding states are the cache's last window - 1 keys plus every key of the verify
pass (the rejected drafts' too). The clean recomputation runs the target afresh over tokens
0 .. p - 1 and drafts from those states; rounds where that equals generate()'s candidates are
marked `matches_generate` (max |diff| < 1e-4 and the same ids). `clean_loop` counts the drafts
the same greedy loop would accept with the clean drafts.

Run (from the repository root):
  /root/.cache/oxinfer/refvenv/bin/python tools/ref/make_tiny_gemma4_assistant.py
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

import transformers
from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM, Gemma4ForCausalLM
from transformers import Gemma4TextConfig
from transformers.generation import candidate_generator as cg

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "tests/fixtures/gemma4-tiny-dense"
OUT = ROOT / "tests/fixtures/gemma4-assistant-tiny"
SEED = 4242
N_NEW = 32
N_DRAFT = 4
PROMPT = [2, 220, 102, 149, 189, 197, 8, 32, 105, 70, 155, 188]
VOCAB = 260


def make_assistant(target_cfg) -> Gemma4AssistantForCausalLM:
    text = Gemma4TextConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=8, global_head_dim=16,
        num_global_key_value_heads=1, attention_k_eq_v=True, max_position_embeddings=512,
        rms_norm_eps=1e-6, initializer_range=0.1, sliding_window=target_cfg.sliding_window,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters=target_cfg.rope_parameters,
        hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
        use_double_wide_mlp=False, enable_moe_block=False, num_kv_shared_layers=2,
        final_logit_softcapping=None, tie_word_embeddings=True,
        pad_token_id=0, bos_token_id=2, eos_token_id=1,
    )
    cfg = Gemma4AssistantConfig(
        text_config=text, backbone_hidden_size=target_cfg.hidden_size,
        use_ordered_embeddings=True, num_centroids=13, centroid_intermediate_top_k=4,
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    m = Gemma4AssistantForCausalLM(cfg).eval()
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "layer_scalar" in name:
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
        m.masked_embedding.token_ordering.copy_(torch.randperm(VOCAB, generator=g))
    return m


def distill(target, assistant, steps: int = 300, chain: int = N_DRAFT):
    """Trains the drafter toward the target's greedy tokens (so that drafts get accepted).

    Data: the target's greedy continuations of the test prompt and of 5 random prompts. Each
    generated position p is a query: input (scaled embedding of token p, target hidden state at
    p - 1), position p, keys < p (full) and [p - 1 - window, p) (sliding); step k of the chain
    (k < `chain`) feeds back the true token p + k and the post-projected hidden state of step
    k - 1 at the same position, label token p + k + 1. Loss: cross-entropy of the full head plus
    that of the centroid logits (the label's cluster), summed over the chain.
    """
    g = torch.Generator().manual_seed(SEED + 1)
    w = assistant.config.get_text_config().sliding_window
    emb = target.get_input_embeddings()
    data = []
    prompts = [torch.tensor([PROMPT])] + [torch.randint(4, VOCAB, (1, 8), generator=g)
                                          for _ in range(5)]
    for prompt in prompts:
        with torch.no_grad():
            seq = target.generate(prompt, max_new_tokens=N_NEW + chain, do_sample=False,
                                  eos_token_id=None)
            o = target(seq, output_hidden_states=True, return_shared_kv_states=True,
                       use_cache=False)
        n = seq.shape[1]
        ps = torch.arange(prompt.shape[1], n - chain)
        k = torch.arange(n)
        neg = torch.finfo(torch.float32).min
        full = torch.where(k[None, :] < ps[:, None], 0.0, neg)[None, None]
        slide = torch.where((k[None, :] < ps[:, None]) & (k[None, :] >= ps[:, None] - 1 - w),
                            0.0, neg)[None, None]
        data.append(dict(
            tokens=[seq[:, ps + j] for j in range(chain + 1)],
            h0=o.hidden_states[-1][:, ps - 1].detach(),
            pos=ps[None], masks={"full_attention": full, "sliding_attention": slide},
            kv={kk: (v[0].detach(), v[1].detach()) for kk, v in o.shared_kv_states.items()},
        ))
    me = assistant.masked_embedding
    cluster = torch.empty(VOCAB, dtype=torch.long)
    cluster[me.token_ordering.long()] = torch.arange(VOCAB) // me.vocab_size_per_centroid
    opt = torch.optim.Adam(assistant.parameters(), lr=3e-3)
    assistant.train()
    for _ in range(steps):
        loss = 0.0
        for d in data:
            h = d["h0"]
            for j in range(chain):
                with torch.no_grad():
                    e = emb(d["tokens"][j])
                x = assistant.pre_projection(torch.cat([e, h], -1))
                out = assistant.model(inputs_embeds=x, attention_mask=d["masks"],
                                      position_ids=d["pos"], shared_kv_states=d["kv"],
                                      use_cache=False, output_hidden_states=True)
                last = out.last_hidden_state
                label = d["tokens"][j + 1][0]
                loss = loss + torch.nn.functional.cross_entropy(assistant.lm_head(last[0]), label)
                loss = loss + torch.nn.functional.cross_entropy(me.centroids(last[0]),
                                                                cluster[label])
                h = assistant.post_projection(last)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assistant.eval()
    print(f"distilled {steps} steps, final loss {float(loss) / len(data) / chain:.3f}", flush=True)


class Recorder:
    """Wraps SinglePositionMultiTokenCandidateGenerator.get_candidates to log each round."""

    def __init__(self):
        self.rounds = []
        self.orig = cg.SinglePositionMultiTokenCandidateGenerator.get_candidates

    def __enter__(self):
        rec = self

        def wrapped(gen, input_ids, model_kwargs, model_outputs, is_first_iteration, n_last_matches,
                    **kw):
            ids, logits = rec.orig(gen, input_ids, model_kwargs, model_outputs, is_first_iteration,
                                   n_last_matches, **kw)
            if logits is not None:
                n = logits.shape[1]
                rec.rounds.append(dict(
                    context=input_ids[0].tolist(),
                    draft=ids[0, -n:].tolist(),
                    logits=logits[0].float().numpy().copy(),
                ))
            return ids, logits

        cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = wrapped
        return self

    def __exit__(self, *a):
        cg.SinglePositionMultiTokenCandidateGenerator.get_candidates = self.orig


def clean_round(target, assistant, context: list[int], n: int):
    """Drafts n tokens after `context` from a fresh target pass over all but its last token."""
    p = len(context) - 1
    ids = torch.tensor([context[:p]])
    with torch.no_grad():
        out = target(ids, output_hidden_states=True, return_shared_kv_states=True, use_cache=False)
    kv = {k: (v[0], v[1]) for k, v in out.shared_kv_states.items()}
    assert kv["full_attention"][0].shape[2] == p and kv["sliding_attention"][0].shape[2] == p
    h = out.hidden_states[-1][:, -1:]
    tok = torch.tensor([[context[-1]]])
    emb = target.get_input_embeddings()
    pos = torch.tensor([[p]])
    mask = torch.ones(1, p + 1, dtype=torch.long)
    draft, logits = [], []
    w = assistant.config.get_text_config().sliding_window
    for step in range(n):
        x = torch.cat([emb(tok), h], dim=-1)
        with torch.no_grad():
            o = assistant(inputs_embeds=x, attention_mask=mask, position_ids=pos,
                          shared_kv_states=kv, use_cache=False)
            if step == 0 and p > w + 2:
                # The sliding layers see exactly the last window + 1 keys.
                for keep, same in ((w + 1, True), (w, False)):
                    cut = dict(kv)
                    cut["sliding_attention"] = tuple(t[:, :, -keep:] for t in kv["sliding_attention"])
                    o2 = assistant(inputs_embeds=x, attention_mask=torch.ones(1, keep + 1),
                                   position_ids=pos, shared_kv_states=cut, use_cache=False)
                    d = (o2.logits - o.logits).abs().max().item()
                    assert (d < 1e-5) if same else (d > 1e-3), (keep, d)
        tok = o.logits.argmax(-1)
        h = o.last_hidden_state
        draft.append(int(tok))
        logits.append(o.logits[0, 0].numpy().copy())
    return draft, np.stack(logits)


def main():
    torch.set_num_threads(1)
    target = Gemma4ForCausalLM.from_pretrained(TARGET, dtype=torch.float32,
                                               attn_implementation="eager").eval()
    assistant = make_assistant(target.config)
    distill(target, assistant)
    assistant.generation_config.num_assistant_tokens = N_DRAFT
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    prompt = torch.tensor([PROMPT])
    with torch.no_grad():
        plain = target.generate(prompt, max_new_tokens=N_NEW, do_sample=False, eos_token_id=None)
        with Recorder() as rec:
            assisted = target.generate(prompt, assistant_model=assistant, max_new_tokens=N_NEW,
                                       do_sample=False, eos_token_id=None)
    plain_ids, assisted_ids = plain[0, len(PROMPT):].tolist(), assisted[0, len(PROMPT):].tolist()
    assert plain_ids == assisted_ids, (plain_ids, assisted_ids)

    rounds, clean_logits, gen_logits = [], [], []
    accepted = drafted = 0
    for r in rec.rounds:
        n = len(r["draft"])
        if n != N_DRAFT:  # the last round may be shorter; keep the arrays rectangular
            continue
        draft, logits = clean_round(target, assistant, r["context"], n)
        diff = float(np.abs(logits - r["logits"]).max())
        full = r["context"] + plain_ids[len(r["context"]) - len(PROMPT):]
        ok = 0
        for i, t in enumerate(r["draft"]):
            if len(r["context"]) + i < len(PROMPT) + N_NEW and full[len(r["context"]) + i] == t:
                ok += 1
            else:
                break
        accepted += ok
        drafted += n
        rounds.append(dict(context_len=len(r["context"]), draft_generate=r["draft"],
                           draft_clean=draft, accepted=ok,
                           generate_vs_clean_max_abs_diff=diff,
                           matches_generate=bool(diff < 1e-4 and draft == r["draft"])))
        clean_logits.append(logits)
        gen_logits.append(r["logits"])

    # The same greedy speculative loop with the clean drafts: how many would be accepted.
    seq = PROMPT + plain_ids
    pos, clean_drafted, clean_accepted, clean_rounds = len(PROMPT) + 1, 0, 0, 0
    while pos < len(seq):
        n = min(N_DRAFT, len(seq) - pos)
        draft, _ = clean_round(target, assistant, seq[:pos], n)
        ok = next((i for i, t in enumerate(draft) if t != seq[pos + i]), n)
        clean_drafted, clean_accepted, clean_rounds = clean_drafted + n, clean_accepted + ok, clean_rounds + 1
        pos += ok + 1

    OUT.mkdir(parents=True, exist_ok=True)
    assistant.save_pretrained(OUT, safe_serialization=True)
    for f in OUT.glob("generation_config.json"):
        f.unlink()
    np.save(OUT / "logits_rounds.npy", np.stack(clean_logits).astype(np.float32))
    np.save(OUT / "logits_generate.npy", np.stack(gen_logits).astype(np.float32))
    # The clean rounds again in float64: float32 rounding alone moves the logits by ~1e-4
    # (more down the chain), so the Rust test compares with these.
    t64 = Gemma4ForCausalLM.from_pretrained(TARGET, dtype=torch.float64,
                                            attn_implementation="eager").eval()
    a64 = Gemma4AssistantForCausalLM.from_pretrained(OUT, dtype=torch.float64,
                                                     attn_implementation="eager").eval()
    l64 = np.stack([clean_round(t64, a64, seq[:r["context_len"]], N_DRAFT)[1] for r in rounds])
    np.save(OUT / "logits_rounds_f64.npy", l64.astype(np.float32))
    f32_vs_f64 = np.abs(np.stack(clean_logits) - l64).max(axis=(0, 2))
    ref = dict(
        generator="tools/ref/make_tiny_gemma4_assistant.py",
        versions=dict(python=sys.version.split()[0], torch=torch.__version__,
                      transformers=transformers.__version__, numpy=np.__version__),
        seed=SEED, target="gemma4-tiny-dense", attn_implementation="eager", dtype="float32",
        prompt=PROMPT, n_new=N_NEW, n_draft=N_DRAFT, greedy_ids=plain_ids,
        assisted_ids=assisted_ids, drafted=drafted, accepted=accepted,
        clean_loop=dict(rounds=clean_rounds, drafted=clean_drafted, accepted=clean_accepted),
        float32_vs_float64_max_abs_diff_per_step=[float(x) for x in f32_vs_f64],
        rounds=rounds,
    )
    (OUT / "reference.json").write_text(json.dumps(ref, indent=1) + "\n")
    size = sum(f.stat().st_size for f in OUT.iterdir())
    print(f"{len(rounds)} rounds, {sum(r['matches_generate'] for r in rounds)} equal to generate(); "
          f"{accepted} of {drafted} drafts accepted; {size} bytes in {OUT}; clean drafts: "
          f"{clean_accepted} of {clean_drafted} accepted in {clean_rounds} rounds")
    for r in rounds:
        print(r["context_len"], r["draft_generate"], r["draft_clean"], r["accepted"],
              f"{r['generate_vs_clean_max_abs_diff']:.2e}")


if __name__ == "__main__":
    main()
