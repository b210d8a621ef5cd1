//! safetensors reader: one file or a sharded set (`model.safetensors.index.json`), memory-mapped.
//!
//! Layout: an 8-byte little-endian header length, a JSON header mapping tensor names to
//! `{dtype, shape, data_offsets: [begin, end]}` (offsets relative to the end of the header), an
//! optional `__metadata__` string map, then the data.

use super::{MappedFile, Span, TensorStore, TensorView};
use crate::error::LoadError;
use oxinfer_kernels::WeightFormat;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest header accepted (the format's own limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

/// One tensor entry of a safetensors header.
#[derive(Clone, Debug)]
pub struct SafetensorsEntry {
    /// dtype as spelled in the header (`F32`, `BF16`, `I8`, ...).
    pub dtype: String,
    /// Row-major shape, outermost first.
    pub shape: Vec<usize>,
    /// Absolute byte offset in the file.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// One mapped safetensors file.
pub struct SafetensorsFile {
    map: Arc<MappedFile>,
    entries: BTreeMap<String, SafetensorsEntry>,
    metadata: BTreeMap<String, String>,
}

fn dtype_size(dtype: &str) -> Option<usize> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8,
        "F32" | "I32" | "U32" => 4,
        "F16" | "BF16" | "I16" | "U16" => 2,
        "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
        _ => return None,
    })
}

/// The weight format of a safetensors dtype, for the dtypes the kernels read.
pub fn dtype_format(dtype: &str) -> Option<WeightFormat> {
    match dtype {
        "F32" => Some(WeightFormat::F32),
        "F16" => Some(WeightFormat::F16),
        "BF16" => Some(WeightFormat::BF16),
        _ => None,
    }
}

impl SafetensorsFile {
    /// Maps and validates one safetensors file.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let map = Arc::new(MappedFile::open(path)?);
        let bytes = map.bytes();
        if bytes.len() < 8 {
            return Err(LoadError::malformed(
                path,
                format!(
                    "truncated safetensors file ({} bytes, no header)",
                    bytes.len()
                ),
            ));
        }
        let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        if header_len > MAX_HEADER || header_len > (bytes.len() - 8) as u64 {
            return Err(LoadError::malformed(
                path,
                format!(
                    "header length {header_len} exceeds the file ({} bytes): not a safetensors \
                     file, or truncated",
                    bytes.len()
                ),
            ));
        }
        let data_start = 8 + header_len as usize;
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..data_start]).map_err(|e| {
                LoadError::malformed(path, format!("header is not a JSON object: {e}"))
            })?;
        let data_len = bytes.len() - data_start;
        let mut entries = BTreeMap::new();
        let mut metadata = BTreeMap::new();
        for (name, v) in header {
            if name == "__metadata__" {
                if let Some(m) = v.as_object() {
                    for (k, v) in m {
                        metadata.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
                    }
                }
                continue;
            }
            let entry = parse_entry(&name, &v, data_len)
                .map_err(|what| LoadError::tensor(path, &name, what))?;
            entries.insert(
                name,
                SafetensorsEntry {
                    offset: entry.offset + data_start,
                    ..entry
                },
            );
        }
        Ok(SafetensorsFile {
            map,
            entries,
            metadata,
        })
    }

    /// The file's bytes.
    pub fn mapped(&self) -> &Arc<MappedFile> {
        &self.map
    }

    /// Tensor entries by name.
    pub fn entries(&self) -> &BTreeMap<String, SafetensorsEntry> {
        &self.entries
    }

    /// The `__metadata__` map.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.map.path()
    }

    fn view(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        let e = self.entries.get(name)?;
        Some(match dtype_format(&e.dtype) {
            Some(format) => Ok(TensorView {
                name: name.to_string(),
                format,
                shape: e.shape.clone(),
                file: self.map.clone(),
                offset: e.offset,
                size: e.size,
                scales: None,
            }),
            None => Err(LoadError::tensor(
                self.path(),
                name,
                format!("dtype {} is not supported for weights", e.dtype),
            )),
        })
    }
}

fn parse_entry(
    name: &str,
    v: &serde_json::Value,
    data_len: usize,
) -> Result<SafetensorsEntry, String> {
    let _ = name;
    let dtype = v
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or("missing 'dtype'")?
        .to_string();
    let elem = dtype_size(&dtype).ok_or_else(|| format!("unknown dtype '{dtype}'"))?;
    let shape: Vec<usize> = v
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or("missing 'shape'")?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<_>>()
        .ok_or("'shape' must be a list of non-negative integers")?;
    let offs = v
        .get("data_offsets")
        .and_then(|s| s.as_array())
        .filter(|a| a.len() == 2)
        .ok_or("missing 'data_offsets' [begin, end]")?;
    let (begin, end) = match (offs[0].as_u64(), offs[1].as_u64()) {
        (Some(b), Some(e)) if b <= e => (b as usize, e as usize),
        _ => return Err(format!("bad data_offsets {offs:?}")),
    };
    if end > data_len {
        return Err(format!(
            "data_offsets [{begin}, {end}] lie past the end of the data ({data_len} bytes): truncated file?"
        ));
    }
    let n = shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|n| n.checked_mul(elem))
        .ok_or_else(|| format!("absurd shape {shape:?}"))?;
    if n != end - begin {
        return Err(format!(
            "shape {shape:?} of {dtype} needs {n} bytes but data_offsets span {}",
            end - begin
        ));
    }
    Ok(SafetensorsEntry {
        dtype,
        shape,
        offset: begin,
        size: n,
    })
}

/// A model's safetensors weights: one file, or every shard named by an index.
pub struct SafetensorsModel {
    path: PathBuf,
    files: Vec<SafetensorsFile>,
    by_name: BTreeMap<String, usize>,
}

impl SafetensorsModel {
    /// Opens `model.safetensors` or `model.safetensors.index.json` (and its shards) in `dir`,
    /// or a single `.safetensors` file given directly.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        if path.is_file() {
            return Self::from_files(path, vec![path.to_path_buf()]);
        }
        let index = path.join("model.safetensors.index.json");
        if index.is_file() {
            let text = std::fs::read_to_string(&index).map_err(|e| LoadError::io(&index, e))?;
            let json: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| LoadError::malformed(&index, format!("invalid JSON: {e}")))?;
            let map = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| LoadError::field(&index, "missing object 'weight_map'"))?;
            let mut shards: Vec<PathBuf> = Vec::new();
            for (tensor, file) in map {
                let file = file.as_str().ok_or_else(|| {
                    LoadError::field(&index, format!("weight_map['{tensor}'] is not a string"))
                })?;
                if file.contains("..") || file.starts_with('/') {
                    return Err(LoadError::field(
                        &index,
                        format!("weight_map['{tensor}'] points outside the folder: {file}"),
                    ));
                }
                let p = path.join(file);
                if !shards.contains(&p) {
                    shards.push(p);
                }
            }
            let model = Self::from_files(path, shards)?;
            for tensor in map.keys() {
                if !model.by_name.contains_key(tensor) {
                    return Err(LoadError::tensor(
                        &index,
                        tensor,
                        "listed in weight_map but missing from its shard",
                    ));
                }
            }
            return Ok(model);
        }
        let single = path.join("model.safetensors");
        if single.is_file() {
            return Self::from_files(path, vec![single]);
        }
        Err(LoadError::malformed(
            path,
            "no model.safetensors or model.safetensors.index.json in this folder",
        ))
    }

    fn from_files(path: &Path, files: Vec<PathBuf>) -> Result<Self, LoadError> {
        let mut opened = Vec::new();
        let mut by_name = BTreeMap::new();
        for f in files {
            let file = SafetensorsFile::open(&f)?;
            for name in file.entries().keys() {
                if by_name.insert(name.clone(), opened.len()).is_some() {
                    return Err(LoadError::tensor(
                        &f,
                        name,
                        "appears in more than one shard",
                    ));
                }
            }
            opened.push(file);
        }
        Ok(SafetensorsModel {
            path: path.to_path_buf(),
            files: opened,
            by_name,
        })
    }

    /// The shards, in index order.
    pub fn files(&self) -> &[SafetensorsFile] {
        &self.files
    }

    /// Total size of the shards in bytes.
    pub fn total_size(&self) -> usize {
        self.files.iter().map(|f| f.map.bytes().len()).sum()
    }

    /// Every tensor's name and entry.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &SafetensorsEntry)> {
        self.files.iter().flat_map(|f| f.entries.iter())
    }

    /// The `__metadata__` value `key` of the first shard that has it.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.files
            .iter()
            .find_map(|f| f.metadata.get(key).map(String::as_str))
    }

    /// The entry called `name` and the shard holding it.
    fn entry(&self, name: &str) -> Option<(&SafetensorsFile, &SafetensorsEntry)> {
        let &i = self.by_name.get(name)?;
        let f = &self.files[i];
        Some((f, f.entries.get(name)?))
    }

    /// A matrix `name` stored in a split format as the pair `name.q8` + `name.q8s` or
    /// `name.q4` + `name.q4s` (the pre-quantized layout of `DESIGN.md`), borrowed from the
    /// mapped shards: `None` when there is no such pair, an error naming the tensor when the
    /// pair is inconsistent (wrong dtype or shape, missing scales, non-finite scales).
    fn split_view(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        let (format, qs_name, sc_name) = [WeightFormat::Q8, WeightFormat::Q4]
            .into_iter()
            .map(|f| {
                let suffix = f.name().to_ascii_lowercase();
                (f, format!("{name}.{suffix}"), format!("{name}.{suffix}s"))
            })
            .find(|(_, q, _)| self.by_name.contains_key(q))?;
        Some(self.split_pair(format, &qs_name, &sc_name, name))
    }

    fn split_pair(
        &self,
        format: WeightFormat,
        qs_name: &str,
        sc_name: &str,
        name: &str,
    ) -> Result<TensorView, LoadError> {
        let (qf, q) = self.entry(qs_name).expect("checked by the caller");
        let bad = |tensor: &str, what: String| {
            LoadError::tensor(
                qf.path(),
                tensor,
                format!("{what} (corrupt pre-quantized {format} checkpoint?)"),
            )
        };
        let (q_dtype, s_dtype, per_byte) = match format {
            WeightFormat::Q8 => ("I8", "F32", 1),
            _ => ("U8", "F16", 2),
        };
        // A matrix, or a stacked `[experts, rows, cols]` tensor of an MoE layer.
        let (lead, qcols) = match &q.shape[..] {
            [lead @ .., qcols] if (1..=2).contains(&lead.len()) => (lead.to_vec(), *qcols),
            _ => {
                return Err(bad(
                    qs_name,
                    format!(
                        "shape {:?}, expected a matrix or stacked [experts, rows, cols]",
                        q.shape
                    ),
                ))
            }
        };
        if q.dtype != q_dtype {
            return Err(bad(
                qs_name,
                format!("dtype {}, expected {q_dtype}", q.dtype),
            ));
        }
        let cols = qcols * per_byte;
        if cols % 32 != 0 {
            return Err(bad(
                qs_name,
                format!("{cols} weights per row is not a multiple of 32"),
            ));
        }
        let Some((sf, sc)) = self.entry(sc_name) else {
            return Err(bad(sc_name, "missing (the scales of its quants)".into()));
        };
        let with_last = |last: usize| [&lead[..], &[last]].concat();
        if sc.dtype != s_dtype || sc.shape != with_last(cols / 32) {
            return Err(bad(
                sc_name,
                format!(
                    "{} {:?}, expected {s_dtype} {:?}",
                    sc.dtype,
                    sc.shape,
                    with_last(cols / 32)
                ),
            ));
        }
        let scales = Span {
            file: sf.map.clone(),
            offset: sc.offset,
            size: sc.size,
        };
        let view = TensorView {
            name: name.to_string(),
            format,
            shape: with_last(cols),
            file: qf.map.clone(),
            offset: q.offset,
            size: q.size,
            scales: Some(scales),
        };
        // Scales are 1/8 of the quants' bytes: checking them all costs little and catches
        // garbage where a file was damaged.
        let sb = view.scales_bytes();
        let bad_scale = if format == WeightFormat::Q8 {
            sb.chunks_exact(4)
                .position(|c| !f32::from_le_bytes([c[0], c[1], c[2], c[3]]).is_finite())
        } else {
            sb.chunks_exact(2)
                .position(|c| !half::f16::from_le_bytes([c[0], c[1]]).is_finite())
        };
        if let Some(i) = bad_scale {
            return Err(bad(
                sc_name,
                format!(
                    "scale {i} (row {}, block {}) is not finite",
                    i / (cols / 32),
                    i % (cols / 32)
                ),
            ));
        }
        Ok(view)
    }
}

impl TensorStore for SafetensorsModel {
    fn path(&self) -> &Path {
        &self.path
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        match self.by_name.get(name) {
            Some(&i) => self.files[i].view(name),
            None => self.split_view(name),
        }
    }
}
