//! The embedding fixtures' shared steps: load a fixture folder as an [`Embedder`], read the
//! texts of its reference.json, encode them with the default options; encode a cross-encoder
//! reference's (query, document) pairs.

use std::path::Path;

use oxinfer::embed::{CrossEncoder, EmbedOptions, Embedder, Encoded};
use serde_json::Value;

/// The fixture folder `dir` as an embedder (panics with the load error).
pub fn load_embedder(dir: &Path) -> Embedder {
    Embedder::load(dir).unwrap_or_else(|e| panic!("{e}"))
}

/// The `texts[].text` strings of `dir`'s reference.json, in order.
pub fn reference_texts(dir: &Path) -> Vec<String> {
    super::reference(dir)["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_string())
        .collect()
}

/// `texts` encoded by `e` with the default options (input `i` numbered `i`).
pub fn encode_texts(e: &Embedder, texts: &[String]) -> Vec<Encoded> {
    let opts = EmbedOptions::default();
    texts
        .iter()
        .enumerate()
        .map(|(i, t)| e.encode(i, t, &opts).unwrap())
        .collect()
}

/// Checks `dir`'s fixture: the input ids of its reference texts, their last hidden states in one
/// batch against hidden.npy (≤ `tol`), and the batch equal to one-by-one runs (exactly).
pub fn check_hidden_states(dir: &Path, tol: f32) {
    let e = load_embedder(dir);
    let r = super::reference(dir);
    let inputs = encode_texts(&e, &reference_texts(dir));
    for (inp, want) in inputs.iter().zip(r["texts"].as_array().unwrap()) {
        assert_eq!(inp.ids, super::ids(&want["ids"]), "{}", want["text"]);
    }
    let (_, want) = super::read_npy_f32(&dir.join("hidden.npy"));
    let got = e.hidden_states(&inputs).unwrap();
    let d = super::max_abs_diff(&got, &want);
    println!(
        "hidden states (one batch of {}): max abs diff {d:.2e}",
        inputs.len()
    );
    assert!(d <= tol, "hidden states differ by {d}");
    let one: Vec<f32> = inputs
        .iter()
        .flat_map(|i| e.hidden_states(std::slice::from_ref(i)).unwrap())
        .collect();
    assert_eq!(
        super::max_abs_diff(&got, &one),
        0.0,
        "batch differs from one-by-one"
    );
}

/// Checks `dir`'s embeddings of its reference texts (batches of 3) against embeddings.npy and,
/// for each named prompt `p`, embeddings_`p`.npy (≤ `tol`); returns the embedding width.
pub fn check_embeddings(dir: &Path, prompts: &[&str], tol: f32) -> usize {
    let e = load_embedder(dir);
    let texts = reference_texts(dir);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut cases = vec![(None, "embeddings.npy".to_string())];
    cases.extend(
        prompts
            .iter()
            .map(|p| (Some(*p), format!("embeddings_{p}.npy"))),
    );
    for (prompt, file) in cases {
        let opts = EmbedOptions {
            prompt: prompt.map(|p| e.prompt(p).unwrap().to_string()),
            batch_size: 3,
            ..EmbedOptions::default()
        };
        let got: Vec<f32> = e.embed(&refs, &opts).unwrap().concat();
        let (shape, want) = super::read_npy_f32(&dir.join(&file));
        assert_eq!(shape, vec![texts.len(), e.dim()], "{file}");
        let d = super::max_abs_diff(&got, &want);
        println!("{file}: max abs diff {d:.2e}");
        assert!(d <= tol, "{file} differs by {d}");
    }
    e.dim()
}

/// A cross-encoder reference's pairs: its `query`, the `document` of each entry of its list,
/// the entries, and each (query, document) encoded by the model (truncating).
pub struct RefPairs<'r> {
    pub query: &'r str,
    pub docs: Vec<&'r str>,
    pub entries: &'r [Value],
    pub encoded: Vec<Encoded>,
}

/// Reads `r["query"]` and the documents of `r[key]` and encodes each pair with `ce`.
pub fn encode_reference_pairs<'r>(ce: &CrossEncoder, r: &'r Value, key: &str) -> RefPairs<'r> {
    let query = r["query"].as_str().unwrap();
    let entries = r[key].as_array().unwrap().as_slice();
    let docs: Vec<&str> = entries
        .iter()
        .map(|e| e["document"].as_str().unwrap())
        .collect();
    let encoded = docs
        .iter()
        .enumerate()
        .map(|(i, d)| ce.encode_pair(i, query, d, true).unwrap())
        .collect();
    RefPairs {
        query,
        docs,
        entries,
        encoded,
    }
}

/// The reranker of `dir` loaded with `--quant` for each `(precision, bound)`: its scores of the
/// reference's pairs (`r[key]`) move off the float32 reference (the quantized kernels ran) by
/// at most `bound`, and rank the documents as the reference does where their scores are
/// further apart than twice the bound.
pub fn quantized_reranker_stays_close(
    dir: &Path,
    key: &str,
    bounds: &[(oxinfer::quant::Precision, f32)],
) {
    let r = super::reference(dir);
    let query = r["query"].as_str().unwrap();
    let entries = r[key].as_array().unwrap();
    let docs: Vec<&str> = entries
        .iter()
        .map(|e| e["document"].as_str().unwrap())
        .collect();
    let want: Vec<f32> = entries
        .iter()
        .map(|e| e["score"].as_f64().unwrap() as f32)
        .collect();
    for &(p, bound) in bounds {
        let ce = CrossEncoder::load_quantized(dir, Some(p)).unwrap_or_else(|e| panic!("{e}"));
        let got = ce.score(query, &docs, true).unwrap();
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| (g - w).abs())
            .fold(0f32, f32::max);
        println!(
            "{} --quant {p:?}: max score diff {worst:.2e}",
            dir.display()
        );
        assert!(worst > 1e-7, "{p:?}: nothing changed");
        assert!(
            worst <= bound,
            "{p:?}: scores differ by {worst} (bound {bound})"
        );
        for i in 0..want.len() {
            for j in 0..want.len() {
                if want[i] > want[j] + 2.0 * bound {
                    assert!(got[i] > got[j], "{p:?}: documents {i} and {j} swapped");
                }
            }
        }
    }
}
