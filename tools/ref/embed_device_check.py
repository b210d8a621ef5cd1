"""Encoders on a CUDA device end to end: `oxinfer embed --device cuda` on the tiny encoder
fixtures' reference texts against their sentence-transformers references (and against `--device
cpu`), printing whether each ran as a device encoder pass (`run_encoder` in `--profile`), and
`oxinfer rerank --device cuda` on the cross-encoder fixture against `CrossEncoder.predict`.
ModernBERT (pre-norm, local windows of 4 in the tiny fixture) runs as a device pass too.
NomicBERT's dynamic NTK scaling is checked on a copy of the dynamic fixture in nomic's remote-code
`config.json` spelling (as crates/oxinfer/tests/nomic_bert_variants.rs makes it).

    python tools/ref/embed_device_check.py path/to/oxinfer      (from the repository root)

Needs numpy; run where the GPU is (docs/embeddings.md has the H100 figures)."""
import json, shutil, subprocess, sys
import numpy as np
ox = sys.argv[1]

# nomic's remote-code spelling of the dynamic fixture, rotary_scaling_factor 2.
remote = "/tmp/oxinfer-nomic-remote"
shutil.rmtree(remote, ignore_errors=True)
shutil.copytree("tests/fixtures/nomic-bert-dynamic", remote)
n = json.load(open(f"{remote}/config.json"))
rope, trained = n["rope_parameters"], n["max_position_embeddings"]
json.dump({
    "architectures": ["NomicBertModel"], "model_type": "nomic_bert", "activation_function": "swiglu",
    "n_embd": n["hidden_size"], "n_head": n["num_attention_heads"], "n_layer": n["num_hidden_layers"],
    "n_inner": n["intermediate_size"], "n_positions": 2 * trained, "max_trained_positions": trained,
    "layer_norm_epsilon": n["layer_norm_eps"], "rotary_emb_base": rope["rope_theta"],
    "rotary_emb_fraction": 1.0, "rotary_emb_interleaved": False, "rotary_emb_scale_base": None,
    "rotary_scaling_factor": 2.0, "prenorm": False, "causal": False, "qkv_proj_bias": False,
    "mlp_fc1_bias": False, "mlp_fc2_bias": False, "type_vocab_size": n["type_vocab_size"],
    "vocab_size": n["vocab_size"], "pad_vocab_size_multiple": 1, "use_flash_attn": True,
}, open(f"{remote}/config.json", "w"))
cases = [("tests/fixtures/bert-tiny", "embeddings.npy"), ("tests/fixtures/xlmr-tiny", "embeddings.npy"),
         ("tests/fixtures/nomic-bert-tiny", "embeddings.npy"),
         ("tests/fixtures/nomic-bert-dynamic", "embeddings_trained.npy"),
         (remote, "embeddings.npy"), ("tests/fixtures/modernbert-tiny", "embeddings.npy")]
for d, ref in cases:
    texts = [t["text"] for t in json.load(open(f"tests/fixtures/{d.split('/')[-1]}/reference.json" if d.startswith("tests") else "tests/fixtures/nomic-bert-dynamic/reference.json"))["texts"]]
    out = {}
    for dev in ("cuda", "cpu"):
        p = subprocess.run([ox, "embed", "-m", d, *[a for t in texts for a in ("-p", t)], "-o", f"/tmp/fx_{dev}.npy", "--device", dev,
                            "--batch", "3", "--profile"], capture_output=True, text=True)
        if p.returncode:
            print(d, dev, "FAILED", p.stderr[-800:]); continue
        calls = [l.strip() for l in p.stderr.splitlines() if "run_encoder" in l]
        out[dev] = (np.load(f"/tmp/fx_{dev}.npy"), calls)
    want = np.load(f"{d}/{ref}")
    for dev, (v, calls) in out.items():
        print(f"{d} {dev}: max abs diff vs {ref} {np.abs(v - want).max():.2e}; {calls[0] if calls else 'no device encoder pass'}")
    if len(out) == 2:
        print(f"{d}: cuda vs cpu max abs diff {np.abs(out['cuda'][0] - out['cpu'][0]).max():.2e}")
# The cross-encoder through `oxinfer rerank` on both devices against sentence-transformers'
# CrossEncoder.predict scores (reference.json's "score" of each pair).
d = "tests/fixtures/bert-cross-encoder"
r = json.load(open(f"{d}/reference.json"))
docs = [p["document"] for p in r["pairs"]]
got = {}
for dev in ("cuda", "cpu"):
    p = subprocess.run([ox, "rerank", "-m", d, "-q", r["query"], *[a for t in docs for a in ("-d", t)], "--device", dev],
                       capture_output=True, text=True)
    if p.returncode:
        print("rerank", dev, "FAILED", p.stderr[-800:]); continue
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    got[dev] = {x["index"]: x["relevance_score"] for x in rows}
    want = {i: pr["score"] for i, pr in enumerate(r["pairs"])}
    print(f"rerank {dev}: max abs diff vs CrossEncoder.predict {max(abs(got[dev][i] - want[i]) for i in want):.2e} ({p.stderr.strip().splitlines()[0] if p.stderr.strip() else 'no device line'})")
if len(got) == 2:
    print(f"rerank cuda vs cpu max abs diff {max(abs(got['cuda'][i] - got['cpu'][i]) for i in got['cpu']):.2e}")
