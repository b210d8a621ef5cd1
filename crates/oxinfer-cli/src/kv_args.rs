//! `--cache-type-k` / `--cache-type-v` (llama.cpp's `-ctk` / `-ctv`): the types the KV cache
//! stores keys and values in, for the commands that build one (run, chat, serve, bench,
//! perplexity, and info, which prints what they cost).

use anyhow::{bail, Result};
use clap::Args;
use oxinfer::plan::KvTypes;
use oxinfer::Model;
use oxinfer_kernels::attention::KvType;

/// KV cache storage types.
#[derive(Args, Debug, Clone, Default)]
pub struct KvArgs {
    /// Type of the cached keys: f32 (default), f16, bf16, q8_0 or q4_0 (32-value blocks with
    /// an f16 scale, as GGUF's). With --device cuda the GPU keeps any of them when keys and
    /// values have one type; other pairs run on the CPU.
    #[arg(long = "cache-type-k", value_name = "TYPE", default_value_t = KvType::F32)]
    pub k: KvType,
    /// Type of the cached values (as --cache-type-k).
    #[arg(long = "cache-type-v", value_name = "TYPE", default_value_t = KvType::F32)]
    pub v: KvType,
}

impl KvArgs {
    /// The types asked for.
    pub fn types(&self) -> KvTypes {
        KvTypes {
            k: self.k,
            v: self.v,
        }
    }

    /// `model` with its caches in the types asked for. Refused when a GPU backend runs the
    /// model and cannot keep those types on the device (the message lists the ones it can).
    pub fn apply(&self, model: Model) -> Result<Model> {
        let types = self.types();
        if let Some(b) = oxinfer::backend::active() {
            if !b.holds_kv(types) {
                let held: Vec<String> = KvType::ALL
                    .iter()
                    .flat_map(|&k| KvType::ALL.iter().map(move |&v| KvTypes { k, v }))
                    .filter(|&t| b.holds_kv(t))
                    .map(|t| format!("{}/{}", t.k, t.v))
                    .collect();
                bail!(
                    "--cache-type-k {} --cache-type-v {}: the {} backend keeps its KV cache as \
                     K/V {}; the other cache types run on the CPU (add --device cpu, or pick \
                     one of those)",
                    types.k,
                    types.v,
                    b.name(),
                    held.join(", ")
                );
            }
        }
        Ok(model.with_kv_types(types))
    }
}
