//! Writes a pre-quantized checkpoint: safetensors shards in the kernels' layout (split formats
//! as `X.q8` + `X.q8s` / `X.q4` + `X.q4s`), every tensor on a 16 KiB boundary of its file,
//! shards of at most 1 GiB (`model.safetensors`, or `model-0000i-of-0000n.safetensors` plus
//! `model.safetensors.index.json`), `__metadata__` naming the precision, and the checkpoint's
//! config / tokenizer / template files copied beside them.
//!
//! The safetensors format wants tensors back to back, so the gaps that alignment leaves are
//! themselves tensors: `__pad.N`, U8 zeros, which readers ignore (ours never asks for them).
//! The JSON header is padded with spaces (allowed by the format) so data starts aligned too.

use super::{Precision, METADATA_KEY};
use crate::error::LoadError;
use crate::loader::TensorView;
use oxinfer_kernels::WeightFormat;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Alignment of every tensor's first byte within its file.
pub const ALIGN: usize = 16 << 10;

/// Prefix of the names of alignment-padding tensors.
pub const PAD_PREFIX: &str = "__pad.";

/// Writer settings.
#[derive(Clone, Debug)]
pub struct WriteOptions {
    /// Largest shard in bytes (header and padding included); a single tensor larger than this
    /// gets a shard of its own.
    pub max_shard_bytes: u64,
}

impl Default for WriteOptions {
    /// Shards of at most 1 GiB.
    fn default() -> Self {
        WriteOptions {
            max_shard_bytes: 1 << 30,
        }
    }
}

/// What was written.
#[derive(Clone, Debug)]
pub struct WriteReport {
    /// The safetensors files written, in order.
    pub shards: Vec<PathBuf>,
    /// Bytes of all shards.
    pub bytes: u64,
    /// Files copied from the checkpoint's folder (config, tokenizer, template).
    pub copied: Vec<String>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// One tensor as stored: name, safetensors dtype, shape and bytes.
struct Part<'a> {
    name: String,
    dtype: &'static str,
    shape: Vec<usize>,
    bytes: &'a [u8],
}

/// The stored tensors of one view: a split format becomes its quants + scales pair.
fn parts(view: &TensorView) -> Result<Vec<Part<'_>>, LoadError> {
    let (_, cols) = view.rows_cols();
    let one = |dtype| {
        vec![Part {
            name: view.name.clone(),
            dtype,
            shape: view.shape.clone(),
            bytes: view.bytes(),
        }]
    };
    Ok(match view.format {
        WeightFormat::F32 => one("F32"),
        WeightFormat::F16 => one("F16"),
        WeightFormat::BF16 => one("BF16"),
        WeightFormat::Q8 | WeightFormat::Q4 => {
            let q8 = view.format == WeightFormat::Q8;
            let suffix = if q8 { "q8" } else { "q4" };
            // Leading dimensions (a stacked expert tensor's `[experts, rows]`) are kept.
            let lead = &view.shape[..view.shape.len().saturating_sub(1)];
            let with_last = |last: usize| [lead, &[last]].concat();
            vec![
                Part {
                    name: format!("{}.{suffix}", view.name),
                    dtype: if q8 { "I8" } else { "U8" },
                    shape: with_last(if q8 { cols } else { cols / 2 }),
                    bytes: view.bytes(),
                },
                Part {
                    name: format!("{}.{suffix}s", view.name),
                    dtype: if q8 { "F32" } else { "F16" },
                    shape: with_last(cols / 32),
                    bytes: view.scales_bytes(),
                },
            ]
        }
        other => {
            return Err(LoadError::tensor(
                view.path(),
                &view.name,
                format!("{other} cannot be written to a pre-quantized checkpoint"),
            ))
        }
    })
}

fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// The header of a shard holding `parts` (padding tensors added), padded with spaces so the
/// data starts on an [`ALIGN`] boundary; and the padding before each part.
fn header(shard: usize, parts: &[Part], meta: &Map<String, Value>) -> (Vec<u8>, Vec<usize>) {
    let mut h = Map::new();
    h.insert("__metadata__".into(), Value::Object(meta.clone()));
    let mut off = 0usize;
    let mut pads = Vec::with_capacity(parts.len());
    for (k, p) in parts.iter().enumerate() {
        let pad = align_up(off) - off;
        if pad > 0 {
            h.insert(
                format!("{PAD_PREFIX}{shard}.{k}"),
                json!({"dtype": "U8", "shape": [pad], "data_offsets": [off, off + pad]}),
            );
            off += pad;
        }
        pads.push(pad);
        h.insert(
            p.name.clone(),
            json!({"dtype": p.dtype, "shape": p.shape, "data_offsets": [off, off + p.bytes.len()]}),
        );
        off += p.bytes.len();
    }
    let mut text = serde_json::to_vec(&Value::Object(h)).expect("a JSON map serializes");
    let total = align_up(8 + text.len());
    text.resize(total - 8, b' ');
    (text, pads)
}

/// Bytes a shard of `parts` takes (a bound on its header included).
fn shard_bytes(parts: &[Part]) -> u64 {
    let data: usize = parts.iter().map(|p| align_up(p.bytes.len())).sum();
    let header = align_up(8 + 256 + parts.len() * 256);
    (header + data) as u64
}

fn write_shard(
    path: &Path,
    shard: usize,
    parts: &[Part],
    meta: &Map<String, Value>,
) -> Result<u64, LoadError> {
    let (head, pads) = header(shard, parts, meta);
    let io = |e| LoadError::io(path, e);
    let tmp = path.with_extension("safetensors.partial");
    let file = std::fs::File::create(&tmp).map_err(io)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    w.write_all(&(head.len() as u64).to_le_bytes())
        .map_err(io)?;
    w.write_all(&head).map_err(io)?;
    let zeros = vec![0u8; ALIGN];
    let mut written = (8 + head.len()) as u64;
    for (p, &pad) in parts.iter().zip(&pads) {
        w.write_all(&zeros[..pad]).map_err(io)?;
        w.write_all(p.bytes).map_err(io)?;
        written += (pad + p.bytes.len()) as u64;
    }
    w.flush().map_err(io)?;
    drop(w);
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(written)
}

/// Extensions of the files copied from the checkpoint's folder (config, tokenizer, template).
const COPIED: &[&str] = &["json", "jinja", "txt", "model", "tiktoken"];

/// Writes `tensors` (in the given order; split pairs stay together) as a pre-quantized
/// checkpoint of `precision` in `out` (created if needed), copying the config, tokenizer and
/// template files of `src_dir`. Refuses an `out` that already holds a model, or is `src_dir`.
///
/// # Errors
/// I/O errors naming the file; a tensor in a format the format cannot store.
pub fn write(
    out: &Path,
    src_dir: &Path,
    tensors: &[TensorView],
    precision: Precision,
    opts: &WriteOptions,
) -> Result<WriteReport, LoadError> {
    let t0 = Instant::now();
    std::fs::create_dir_all(out).map_err(|e| LoadError::io(out, e))?;
    let same = match (out.canonicalize(), src_dir.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(LoadError::malformed(
            out,
            "is the checkpoint's own folder: choose another output folder",
        ));
    }
    for existing in ["model.safetensors", "model.safetensors.index.json"] {
        if out.join(existing).exists() {
            return Err(LoadError::malformed(
                out,
                format!("already holds a model ({existing}): remove it or choose another folder"),
            ));
        }
    }
    // Group each view's parts, then fill shards greedily.
    let groups: Vec<Vec<Part>> = tensors.iter().map(parts).collect::<Result<_, _>>()?;
    let mut shards: Vec<Vec<Part>> = vec![Vec::new()];
    for g in groups {
        let cur = shards.last_mut().expect("at least one shard");
        let grown: u64 = shard_bytes(cur)
            + g.iter()
                .map(|p| align_up(p.bytes.len()) as u64 + 256)
                .sum::<u64>();
        if !cur.is_empty() && grown > opts.max_shard_bytes {
            shards.push(g);
        } else {
            cur.extend(g);
        }
    }
    let mut meta = Map::new();
    meta.insert("format".into(), json!("pt"));
    meta.insert(METADATA_KEY.into(), json!(precision.name()));
    let n = shards.len();
    let names: Vec<String> = if n == 1 {
        vec!["model.safetensors".into()]
    } else {
        (1..=n)
            .map(|i| format!("model-{i:05}-of-{n:05}.safetensors"))
            .collect()
    };
    let mut report = WriteReport {
        shards: Vec::new(),
        bytes: 0,
        copied: Vec::new(),
        seconds: 0.0,
    };
    let mut weight_map = Map::new();
    for (i, (parts, name)) in shards.iter().zip(&names).enumerate() {
        let path = out.join(name);
        report.bytes += write_shard(&path, i, parts, &meta)?;
        report.shards.push(path);
        for p in parts {
            weight_map.insert(p.name.clone(), json!(name));
        }
    }
    if n > 1 {
        let index = json!({
            "metadata": {"total_size": report.bytes, METADATA_KEY: precision.name()},
            "weight_map": weight_map,
        });
        let path = out.join("model.safetensors.index.json");
        let text = serde_json::to_string_pretty(&index).expect("JSON serializes");
        std::fs::write(&path, text).map_err(|e| LoadError::io(&path, e))?;
    }
    let entries = std::fs::read_dir(src_dir).map_err(|e| LoadError::io(src_dir, e))?;
    for e in entries.flatten() {
        let p = e.path();
        let file_name = e.file_name().to_string_lossy().into_owned();
        let wanted = p.is_file()
            && p.extension()
                .is_some_and(|x| COPIED.iter().any(|c| x.eq_ignore_ascii_case(c)))
            && file_name != "model.safetensors.index.json";
        if wanted {
            let dst = out.join(&file_name);
            std::fs::copy(&p, &dst).map_err(|e| LoadError::io(&p, e))?;
            report.copied.push(file_name);
        }
    }
    report.copied.sort();
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}
