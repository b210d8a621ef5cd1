"""Embedding speed on a CUDA machine: texts/s for 1,000 texts (16-128 tokens, embed_bench.py's
texts) with a random-weight model of a sentence-transformers model's config and tokenizer
(all-MiniLM-L6-v2's in docs/embeddings.md, whose weights were too large to carry to the GPU
host): `oxinfer embed --device cuda` and `--device cpu` (the rate each process reports with the
model loaded, and the whole process's) against transformers on the GPU (the model + mean pooling
+ L2 norm, fp32 and fp16, model loaded before timing), batches of 32 and 128, with the worst
cosine of oxinfer's CUDA vectors against transformers fp32.

    python tools/bench/embed_gpu_bench.py MODEL_DIR_WITHOUT_WEIGHTS path/to/oxinfer [modernbert]

MODEL_DIR: config.json, tokenizer files, modules.json, 1_Pooling/ (no weights needed: random
ones are written to a copy in /tmp/minilm). With `modernbert`, MODEL_DIR is a ModernBERT folder
(tests/fixtures/modernbert-tiny: its tokenizer) whose config is widened to modernbert-embed-base's
geometry (768 wide, 22 layers of 12 heads, MLP 1152, local windows of 128, every third layer
global). Needs torch with CUDA and transformers."""
import json, os, subprocess, sys, time
import numpy as np, torch
sys.path.insert(0, "tools/bench")
from embed_bench import make_texts
from transformers import AutoConfig, AutoModel, AutoTokenizer

src, ox = sys.argv[1], sys.argv[2]
modern = len(sys.argv) > 3 and sys.argv[3] == "modernbert"
d = "/tmp/minilm"
subprocess.run(["rm", "-rf", d], check=True)
subprocess.run(["cp", "-r", src, d], check=True)
subprocess.run(f"rm -f {d}/*.safetensors {d}/*.npy", shell=True, check=True)
if modern:
    c = json.load(open(f"{d}/config.json"))
    c.update(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
             local_attention=128, max_position_embeddings=8192,
             layer_types=["full_attention" if i % 3 == 0 else "sliding_attention" for i in range(22)])
    json.dump(c, open(f"{d}/config.json", "w"), indent=1)
torch.manual_seed(0)
cfg = AutoConfig.from_pretrained(d)
cfg._attn_implementation = "sdpa"
m = AutoModel.from_config(cfg, **({} if modern else {"add_pooling_layer": False}))
with torch.no_grad():
    for p in m.parameters():
        if p.dim() > 1:
            p.normal_(0.0, 0.02)
m.save_pretrained(d, safe_serialization=True)
tok = AutoTokenizer.from_pretrained(d)
texts = make_texts(tok, 1000)
with open("/tmp/texts.txt", "w") as f:
    f.write("\n".join(texts) + "\n")
lens = [len(tok(t)["input_ids"]) for t in texts]
print(f"{len(texts)} texts, {min(lens)}-{max(lens)} tokens (mean {np.mean(lens):.1f})")

def torch_encode(model, batch=32):
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            b = tok(texts[i:i + batch], padding=True, truncation=True, return_tensors="pt").to("cuda")
            h = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state.float()
            mask = b["attention_mask"].unsqueeze(-1).float()
            v = (h * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(v, dim=-1).cpu())
    torch.cuda.synchronize()
    return torch.cat(out).numpy()

for dtype in (torch.float32, torch.float16):
    kw = {} if modern else {"add_pooling_layer": False}
    model = AutoModel.from_pretrained(d, torch_dtype=dtype, **kw).cuda().eval()
    torch_encode(model)  # warm-up
    for batch in (32, 128):
        for r in range(2):
            t0 = time.perf_counter(); got = torch_encode(model, batch); s = time.perf_counter() - t0
            print(f"transformers cuda {str(dtype)[6:]} batch {batch}: {len(texts)/s:.0f} texts/s ({s:.3f} s)")
            if batch == 32:
                ref = got
    if dtype == torch.float32:
        ref32 = ref
def ox_embed(device, batch, out):
    """One whole `oxinfer embed` process: (texts/s of the process, texts/s it reports for
    tokenizing and encoding with the model loaded)."""
    t0 = time.perf_counter()
    p = subprocess.run([ox, "embed", "-m", d, "-f", "/tmp/texts.txt", "-o", out, "--device", device, "--batch", str(batch)],
                       check=True, stderr=subprocess.PIPE, text=True)
    s = time.perf_counter() - t0
    inner = [l for l in p.stderr.splitlines() if "texts/s" in l]
    rate = float(inner[-1].split(", ")[-1].split()[0]) if inner else float("nan")
    return len(texts) / s, rate

for batch in (32, 128):
    for r in range(3):
        whole, inner = ox_embed("cuda", batch, "/tmp/ox.npy")
        v = np.load("/tmp/ox.npy")
        cos = (v * ref32).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref32, axis=1)
        print(f"oxinfer embed --device cuda --batch {batch}: {inner:.0f} texts/s model loaded ({whole:.0f} for the whole process), worst cosine vs transformers fp32 {cos.min():.7f}")
whole, inner = ox_embed("cpu", 32, "/tmp/oxc.npy")
print(f"oxinfer embed --device cpu (all host cores): {inner:.0f} texts/s model loaded ({whole:.0f} whole process)")
