//! `--cache-type-k` / `--cache-type-v` (and llama.cpp's `-ctk` / `-ctv`) through the binary:
//! an unknown type is refused by name, `--tokens --dump-logits` run with a q8_0 cache near
//! transformers' logits, and `info` prints the cache's bytes per position in the types asked.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_exits_with, oxinfer, stderr, stdout};
use common::{fixtures, ids, max_abs_diff, read_npy_f32, reference, scratch_dir};

#[test]
fn unknown_cache_type_is_refused_by_name() {
    let gguf = fixtures().join("llama-tiny-a/model.gguf");
    for flag in ["--cache-type-k", "--cache-type-v", "-ctk"] {
        let o = oxinfer(&[
            "run",
            "-m",
            gguf.to_str().unwrap(),
            flag,
            "q3",
            "--tokens",
            "1",
        ]);
        assert_exits_with(&o, 2, &["q3"]);
        let err = stderr(&o);
        assert!(err.contains("q8_0") && err.contains("q4_0"), "{err}");
    }
}

/// The prompt logits with q8_0 keys and values (`-ctk`/`-ctv` spelling) within the q8_0 bound
/// of the library test (tests/kv_types.rs) of transformers float32.
#[test]
fn dump_logits_with_a_q8_0_cache() {
    let dir = fixtures().join("llama-tiny-b");
    let r = reference(&dir);
    let p = &r["prompts"][1];
    let prompt: Vec<String> = ids(&p["ids"]).iter().map(|i| i.to_string()).collect();
    let out = scratch_dir("kv-dump").join("logits.npy");
    let o = oxinfer(&[
        "run",
        "-m",
        dir.join("model.gguf").to_str().unwrap(),
        "-ctk",
        "q8_0",
        "-ctv",
        "q8_0",
        "--tokens",
        &prompt.join(","),
        "--temp",
        "0",
        "--max-tokens",
        "1",
        "--dump-logits",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (_, got) = read_npy_f32(&out);
    let (_, want) = read_npy_f32(&dir.join(p["logits_file"].as_str().unwrap()));
    let d = max_abs_diff(&got, &want);
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(d <= 0.05 * scale, "max abs diff {d} (max |logit| {scale})");
}

/// `info` prints K and V bytes per position: per layer and position, one row of
/// `n_kv_heads × head_dim` values each for keys and values, in GGUF's block sizes.
#[test]
fn info_prints_kv_bytes_per_position() {
    let dir = fixtures().join("llama-tiny-a");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let n = |k: &str| cfg[k].as_u64().unwrap() as usize;
    let width = n("num_key_value_heads") * n("head_dim");
    let layers = n("num_hidden_layers");
    // (type, bytes per row of `width` values): f32 4 per value; q8_0 34 and q4_0 18 per 32.
    for (ty, row) in [
        ("f32", 4 * width),
        ("q8_0", width.div_ceil(32) * 34),
        ("q4_0", width.div_ceil(32) * 18),
    ] {
        let o = oxinfer(&[
            "info",
            dir.to_str().unwrap(),
            "--cache-type-k",
            ty,
            "--cache-type-v",
            ty,
            "-c",
            "256",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let s = stdout(&o);
        let per = 2 * layers * row;
        let want = format!("K {ty} / V {ty}: {per} bytes per position");
        assert!(s.contains(&want), "{want:?} missing in:\n{s}");
        let total = format!("{:.1} MiB at ctx 256", (256 * per) as f64 / 1048576.0);
        assert!(s.contains(&total), "{total:?} missing in:\n{s}");
    }
}
