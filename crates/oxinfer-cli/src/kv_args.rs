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
    /// an f16 scale, as GGUF's). The CPU runs the other types than f32.
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
    /// model: device caches are f32 only (use `--device cpu`).
    pub fn apply(&self, model: Model) -> Result<Model> {
        let types = self.types();
        if !types.is_f32() {
            if let Some(b) = oxinfer::backend::active() {
                bail!(
                    "--cache-type-k {} --cache-type-v {}: the {} backend keeps an f32 KV cache; \
                     the other cache types run on the CPU (add --device cpu, or drop the flags)",
                    types.k,
                    types.v,
                    b.name()
                );
            }
        }
        Ok(model.with_kv_types(types))
    }
}
