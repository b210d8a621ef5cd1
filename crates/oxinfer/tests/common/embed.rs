//! The embedding fixtures' shared steps: load a fixture folder as an [`Embedder`], read the
//! texts of its reference.json, encode them with the default options.

use std::path::Path;

use oxinfer::embed::{EmbedOptions, Embedder, Encoded};

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
