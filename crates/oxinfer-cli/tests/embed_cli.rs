//! `oxinfer embed` as a process on the tiny BERT sentence-transformers fixture: the .npy and
//! JSON-lines outputs equal sentence-transformers' `encode` (tests/fixtures/bert-tiny), a
//! prompt, --no-normalize, --quant, and bad input (nothing to embed, a non-embedding model, an unknown
//! output extension, too long with --no-truncate) giving one clear error line; `oxinfer rerank`
//! on the cross-encoder fixture against sentence-transformers' `CrossEncoder.predict`.

mod cli_process;
#[path = "../../oxinfer/tests/common/mod.rs"]
mod common;

use cli_process::{assert_exits_with, assert_fails_with, ok, oxinfer};
use common::{fixtures, max_abs_diff, read_npy_f32, reference, scratch_dir};

fn tiny() -> String {
    fixtures().join("bert-tiny").to_str().unwrap().to_string()
}

fn tiny_texts() -> Vec<String> {
    reference(&fixtures().join("bert-tiny"))["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn npy_from_a_file_matches_sentence_transformers() {
    let dir = scratch_dir("embed-npy");
    let texts = tiny_texts();
    let input = dir.join("texts.txt");
    std::fs::write(&input, texts.join("\n") + "\n").unwrap();
    let out = dir.join("e.npy");
    let model = tiny();
    let args = [
        "embed",
        "-m",
        &model,
        "-f",
        input.to_str().unwrap(),
        "--batch",
        "3",
    ];
    ok(oxinfer(
        &[&args[..], &["-o", out.to_str().unwrap()]].concat(),
    ));
    let (shape, got) = read_npy_f32(&out);
    let (want_shape, want) = read_npy_f32(&fixtures().join("bert-tiny/embeddings.npy"));
    assert_eq!(shape, want_shape);
    assert!(max_abs_diff(&got, &want) <= 1e-5);

    let qout = dir.join("q.npy");
    let q = ["--prompt-name", "query", "-o", qout.to_str().unwrap()];
    ok(oxinfer(&[&args[..], &q[..]].concat()));
    let (_, want_q) = read_npy_f32(&fixtures().join("bert-tiny/embeddings_query.npy"));
    assert!(max_abs_diff(&read_npy_f32(&qout).1, &want_q) <= 1e-5);
}

#[test]
fn jsonl_on_stdout_and_no_normalize() {
    let texts = tiny_texts();
    let model = tiny();
    let (out, _) = ok(oxinfer(&[
        "embed", "-m", &model, "-p", &texts[0], "-p", &texts[1],
    ]));
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let (_, want) = read_npy_f32(&fixtures().join("bert-tiny/embeddings.npy"));
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i);
        let v: Vec<f32> = l["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect();
        assert!(max_abs_diff(&v, &want[i * 16..(i + 1) * 16]) <= 1e-5);
    }
    let (raw, _) = ok(oxinfer(&[
        "embed",
        "-m",
        &model,
        "-p",
        "hello",
        "--no-normalize",
    ]));
    let v: serde_json::Value = serde_json::from_str(raw.trim()).unwrap();
    let norm: f64 = v["embedding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap().powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((norm - 1.0).abs() > 1e-3, "norm {norm}");
}

#[test]
fn quantized_weights_stay_close_to_sentence_transformers() {
    // --quant converts the encoder's matrices on load: the embeddings move (the quantized
    // kernels ran) but stay close (worst cosine measured 0.99945 for q8, 0.999988 for bf16).
    let dir = scratch_dir("embed-quant");
    let input = dir.join("texts.txt");
    std::fs::write(&input, tiny_texts().join("\n") + "\n").unwrap();
    let (_, want) = read_npy_f32(&fixtures().join("bert-tiny/embeddings.npy"));
    let model = tiny();
    for (quant, min_cosine) in [("q8", 0.999), ("bf16", 0.9999)] {
        let out = dir.join(format!("{quant}.npy"));
        let f = input.to_str().unwrap();
        let o = out.to_str().unwrap();
        ok(oxinfer(&[
            "embed", "-m", &model, "-f", f, "--quant", quant, "-o", o,
        ]));
        let (shape, got) = read_npy_f32(&out);
        assert!(max_abs_diff(&got, &want) > 1e-5, "{quant}: nothing changed");
        for (g, w) in got.chunks(shape[1]).zip(want.chunks(shape[1])) {
            let dot: f32 = g.iter().zip(w).map(|(a, b)| a * b).sum();
            let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
            let cosine = dot / (norm(g) * norm(w));
            assert!(cosine >= min_cosine, "{quant}: cosine {cosine}");
        }
    }
    let gguf = fixtures().join("bert-tiny-gguf/model.gguf");
    assert_fails_with(
        &oxinfer(&[
            "embed",
            "-m",
            gguf.to_str().unwrap(),
            "-p",
            "x",
            "--quant",
            "q8",
        ]),
        &["--quant q8", "GGUF"],
    );
}

#[test]
fn bad_input_gives_one_error_line() {
    let model = tiny();
    assert_fails_with(&oxinfer(&["embed", "-m", &model]), &["nothing to embed"]);
    let llm = fixtures().join("llama-tiny-a");
    assert_fails_with(
        &oxinfer(&["embed", "-m", llm.to_str().unwrap(), "-p", "x"]),
        &["unsupported architecture", "bert"],
    );
    let gguf = fixtures().join("llama-tiny-a/model.gguf");
    assert_fails_with(
        &oxinfer(&["embed", "-m", gguf.to_str().unwrap(), "-p", "x"]),
        &["not an embedding model"],
    );
    assert_fails_with(
        &oxinfer(&["embed", "-m", &model, "-p", "x", "-o", "out.csv"]),
        &[".npy or .jsonl"],
    );
    let long = "word ".repeat(50);
    assert_fails_with(
        &oxinfer(&["embed", "-m", &model, "-p", &long, "--no-truncate"]),
        &["input 0", "limit of 24"],
    );
    assert_exits_with(&oxinfer(&["embed", "--batch", "x"]), 2, &["--batch"]);
}

#[test]
fn rerank_matches_cross_encoder_predict() {
    let dir = fixtures().join("bert-cross-encoder");
    let r = reference(&dir);
    let pairs = r["pairs"].as_array().unwrap();
    let docs: Vec<&str> = pairs
        .iter()
        .map(|p| p["document"].as_str().unwrap())
        .collect();
    let model = dir.to_str().unwrap().to_string();
    let mut args = vec![
        "rerank",
        "-m",
        &model,
        "-q",
        r["query"].as_str().unwrap(),
        "--device",
        "cpu",
    ];
    for d in &docs {
        args.extend(["-d", d]);
    }
    let (out, _) = ok(oxinfer(&args));
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), docs.len());
    let mut last = f64::INFINITY;
    for row in &rows {
        let i = row["index"].as_u64().unwrap() as usize;
        let got = row["relevance_score"].as_f64().unwrap();
        let want = pairs[i]["score"].as_f64().unwrap();
        assert!(
            (got - want).abs() <= 1e-5,
            "document {i}: {got} against {want}"
        );
        assert_eq!(row["document"], docs[i]);
        assert!(got <= last, "not ranked best first: {out}");
        last = got;
    }
    args.extend(["--top-n", "1"]);
    let (top, _) = ok(oxinfer(&args));
    assert_eq!(top.lines().count(), 1);
    assert_eq!(top.lines().next(), out.lines().next());
    assert_fails_with(
        &oxinfer(&["rerank", "-m", &model, "-q", "a query"]),
        &["nothing to rerank"],
    );
}
