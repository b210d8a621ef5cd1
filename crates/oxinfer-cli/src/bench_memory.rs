//! `oxinfer bench --memory`: the read bandwidth the decode kernels can reach (the probe of
//! `oxinfer_kernels::membw`), with `-m` the decode ceiling it implies for a model, and with
//! `--formats` each weight format's one-token product timed beside the probe in the same minute
//! (how close each decode kernel streams to the wall).

use anyhow::{bail, Result};
use oxinfer::Model;
use oxinfer_kernels::membw::{self, DecodeProduct, ProbeBuffer};
use oxinfer_kernels::WeightFormat;

/// Bytes of weights a decode step reads: every matrix once, the embedding table one row
/// (unless it is also the output head).
fn bytes_per_token(model: &Model) -> u64 {
    let info = model.info();
    let c = model.config();
    let embed = (c.vocab_size * c.hidden_size) as f64 / info.parameters.max(1) as f64
        * info.file_size as f64;
    if c.tie_embeddings {
        info.file_size
    } else {
        (info.file_size as f64 - embed) as u64
    }
}

/// The formats `--formats` names: `all` (every format with synthetic weights), else a
/// comma-separated list of GGUF names (`q4_k,q6_k`).
pub fn parse_formats(list: &str) -> Result<Vec<WeightFormat>> {
    if list.trim().eq_ignore_ascii_case("all") {
        return Ok(WeightFormat::ALL
            .into_iter()
            .filter(|&f| oxinfer_kernels::synthetic::supports(f))
            .collect());
    }
    list.split(',')
        .map(|name| {
            let f = WeightFormat::from_name(name.trim())
                .ok_or_else(|| anyhow::anyhow!("--formats: unknown weight format {name:?}"))?;
            if !oxinfer_kernels::synthetic::supports(f) {
                bail!(
                    "--formats: {} has no synthetic weights to time (formats with plain f16 \
                     scales and the float formats do)",
                    f.name()
                );
            }
            Ok(f)
        })
        .collect()
}

/// Bytes of each format's timed matrix: beyond the last-level caches.
const FORMAT_BYTES: usize = 256 << 20;

/// Alternating passes per format (probe, product, probe, ...): the best of each counts.
const FORMAT_PASSES: usize = 20;

/// Prints the probe, the model's ceiling and the formats' decode bandwidth.
pub fn run(model: Option<Model>, formats: &[WeightFormat]) -> Result<()> {
    let threads = oxinfer_kernels::pool::pool_threads();
    let probe = ProbeBuffer::new(membw::PROBE_BYTES);
    let bw = probe.measure(membw::PROBE_PASSES, membw::PROBE_SECONDS);
    println!(
        "memory read bandwidth: {:.1} GB/s (1 thread), {:.1} GB/s ({threads} threads), best of {} \
         alternating passes each over {} MiB",
        bw.single,
        bw.all,
        bw.passes,
        membw::PROBE_BYTES >> 20
    );
    if let Some(model) = model {
        let b = bytes_per_token(&model);
        println!(
            "decode ceiling for {}: {:.1} MB read per token → {:.1} tok/s",
            model.path().display(),
            b as f64 / 1e6,
            bw.all * 1e9 / b as f64
        );
    }
    if formats.is_empty() {
        return Ok(());
    }
    // A probe of the products' size, so both stream the same amount per pass.
    let probe = ProbeBuffer::new(FORMAT_BYTES);
    println!();
    println!("| format | decode GB/s | probe GB/s | of the probe |");
    println!("|---|---:|---:|---:|");
    for &f in formats {
        let Some(product) = DecodeProduct::new(f, FORMAT_BYTES) else {
            continue;
        };
        let (gbs, wall) = membw::decode_vs_probe(&product, &probe, FORMAT_PASSES);
        println!(
            "| {} | {gbs:.1} | {wall:.1} | {:.0} % |",
            f.name(),
            100.0 * gbs / wall
        );
    }
    println!(
        "(one-token products on {threads} threads over {} MiB of synthetic weights each, in \
         alternation with probe passes of the same size: the best of {FORMAT_PASSES} each)",
        FORMAT_BYTES >> 20
    );
    Ok(())
}
