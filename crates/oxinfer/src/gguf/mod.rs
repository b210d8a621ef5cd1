//! GGUF v2/v3 reader: header, metadata (every value type, nested arrays), tensor table and
//! alignment, over memory-mapped files so tensors are borrowed without copying. A model split
//! into several files by llama.cpp's `gguf-split` (`name-00001-of-00003.gguf`, ...) opens as one
//! [`GgufFile`] ([`split`]).
//!
//! Every count and offset read from the file is checked against the file's size before anything
//! is allocated, so a truncated or corrupt file gives an error naming the field, never a panic or
//! an absurd allocation.

pub mod split;
mod value;

pub use value::{MetaArray, MetaValue};

use crate::error::LoadError;
use crate::mapped::{MappedFile, TensorView};
use oxinfer_kernels::WeightFormat;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `GGUF` in little-endian byte order.
const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// llama.cpp's limit on tensor dimensions.
const MAX_DIMS: u32 = 4;
/// Nesting limit for arrays of arrays (the format allows nesting; real files use none).
const MAX_ARRAY_DEPTH: usize = 8;

/// One entry of the tensor table.
#[derive(Clone, Debug)]
pub struct GgufTensorInfo {
    /// Tensor name, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// Dimensions in GGUF order: `dims[0]` is the contiguous (fastest) one.
    pub dims: Vec<u64>,
    /// Storage format.
    pub format: WeightFormat,
    /// Byte offset from the start of the file that holds the tensor (part [`Self::part`]).
    pub offset: usize,
    /// Index of the file holding the tensor's data in [`GgufFile::parts`]: 0 for a single
    /// file; for a split model, the part number minus one.
    pub part: usize,
    /// Size in bytes.
    pub size: usize,
}

impl GgufTensorInfo {
    /// Shape in row-major order, outermost first (the reverse of `dims`), as in PyTorch.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }
}

/// An open GGUF model: metadata, tensor table, and the mapped bytes of its file (or of every
/// part of a split model: the metadata is the first part's, the table spans all parts).
pub struct GgufFile {
    path: PathBuf,
    /// The mapped files: one, or every part of a split model in order.
    parts: Vec<Arc<MappedFile>>,
    version: u32,
    metadata: BTreeMap<String, MetaValue>,
    tensors: Vec<GgufTensorInfo>,
    by_name: BTreeMap<String, usize>,
    data_offset: usize,
    alignment: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("parts", &self.parts.len())
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Maps and parses a GGUF file. When it is one part of a split model (metadata
    /// `split.count` > 1), every part is mapped and presented as one model ([`split::join`]);
    /// a missing or mismatched part is an error naming the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let file = split::join(Self::open_single(path.as_ref())?)?;
        // The memory rule over the whole model (every part): a few growing tensors (IQ2_XS
        // `ffn_down` among 4-bit ones) are packed when the model stays within the rule.
        let fits = oxinfer_kernels::packed::model_fits_packed(
            file.tensors.iter().map(|t| (t.format, t.size)),
        );
        for part in &file.parts {
            part.set_fits_packed(fits);
        }
        Ok(file)
    }

    /// Maps and parses one GGUF file, without looking for the other parts of a split model.
    pub fn open_single(path: &Path) -> Result<Self, LoadError> {
        let map = Arc::new(MappedFile::open(path)?);
        Self::parse(path, map)
    }

    /// Parses GGUF bytes already mapped (or read) into memory, as one file (the other parts of
    /// a split model are not looked for).
    pub fn parse(path: &Path, map: Arc<MappedFile>) -> Result<Self, LoadError> {
        let bytes = map.bytes();
        let mut r = Reader {
            bytes,
            pos: 0,
            path,
        };
        let magic = r.take(4, "magic")?;
        if magic != MAGIC {
            return Err(LoadError::malformed(
                path,
                format!("not a GGUF file (magic {magic:02x?}, expected \"GGUF\")"),
            ));
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(LoadError::malformed(
                path,
                format!("unsupported GGUF version {version} (supported: 2 and 3)"),
            ));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // Each metadata entry takes at least 12 bytes, each tensor entry at least 24.
        r.check_count(n_kv, 12, "metadata count")?;
        r.check_count(n_tensors, 24, "tensor count")?;

        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key #{i}"))?;
            let ty = r.u32(&format!("type of metadata '{key}'"))?;
            let value = r.value(ty, &key, 0)?;
            metadata.insert(key, value);
        }

        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= 1 << 20 => a,
                _ => {
                    return Err(LoadError::field(
                        path,
                        format!("general.alignment = {v} is not a power of two"),
                    ))
                }
            },
        };

        let mut infos = Vec::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&format!("name of tensor #{i}"))?;
            let n_dims = r.u32(&format!("tensor '{name}': dimension count"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(LoadError::tensor(
                    path,
                    &name,
                    format!("{n_dims} dimensions (expected 1..={MAX_DIMS})"),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(r.u64(&format!("tensor '{name}': dimension {d}"))?);
            }
            let ty = r.u32(&format!("tensor '{name}': type"))?;
            let offset = r.u64(&format!("tensor '{name}': offset"))?;
            infos.push((name, dims, ty, offset));
        }
        let data_offset = r.pos.div_ceil(alignment as usize) * alignment as usize;
        let file_len = bytes.len();

        let mut tensors = Vec::with_capacity(infos.len());
        let mut by_name = BTreeMap::new();
        for (name, dims, ty, offset) in infos {
            let format = WeightFormat::from_ggml_type(ty).ok_or_else(|| {
                let known = WeightFormat::unhandled_ggml_type_name(ty)
                    .map_or(String::new(), |n| format!(" ({n})"));
                LoadError::tensor(
                    path,
                    &name,
                    format!("unsupported tensor type id {ty}{known}"),
                )
            })?;
            let n_elems = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    LoadError::tensor(path, &name, format!("absurd dimensions {dims:?}"))
                })?;
            if dims[0] % format.block_size() as u64 != 0 {
                return Err(LoadError::tensor(
                    path,
                    &name,
                    format!(
                        "row length {} is not a multiple of the {} block size {}",
                        dims[0],
                        format.name(),
                        format.block_size()
                    ),
                ));
            }
            let size = (n_elems / format.block_size() as u64)
                .checked_mul(format.block_bytes() as u64)
                .ok_or_else(|| {
                    LoadError::tensor(path, &name, format!("absurd dimensions {dims:?}"))
                })?;
            if offset % alignment != 0 {
                return Err(LoadError::tensor(
                    path,
                    &name,
                    format!("data offset {offset} is not aligned to {alignment}"),
                ));
            }
            let start = (data_offset as u64).checked_add(offset);
            let end = start.and_then(|s| s.checked_add(size));
            match (start, end) {
                (Some(s), Some(e)) if e <= file_len as u64 => {
                    let info = GgufTensorInfo {
                        name: name.clone(),
                        dims,
                        format,
                        offset: s as usize,
                        part: 0,
                        size: size as usize,
                    };
                    if by_name.insert(name.clone(), tensors.len()).is_some() {
                        return Err(LoadError::tensor(path, &name, "appears twice"));
                    }
                    tensors.push(info);
                }
                _ => {
                    return Err(LoadError::tensor(
                        path,
                        &name,
                        format!(
                            "data [{} + {offset}, +{size} bytes) lies past the end of the file \
                             ({file_len} bytes): truncated file?",
                            data_offset
                        ),
                    ))
                }
            }
        }

        Ok(GgufFile {
            path: path.to_path_buf(),
            parts: vec![map],
            version,
            metadata,
            tensors,
            by_name,
            data_offset,
            alignment,
        })
    }

    /// The file's path (the first part's, for a split model).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Alignment of the tensor data in bytes.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Offset of the tensor data section from the start of the file (the first part's).
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Size in bytes: of the file, or of all parts of a split model together.
    pub fn file_size(&self) -> usize {
        self.parts.iter().map(|p| p.bytes().len()).sum()
    }

    /// The mapped file (the first part's, for a split model), shared with the tensors borrowed
    /// from it.
    pub fn mapped(&self) -> &Arc<MappedFile> {
        &self.parts[0]
    }

    /// Every mapped file: the one file, or the parts of a split model in order
    /// ([`GgufTensorInfo::part`] indexes this).
    pub fn parts(&self) -> &[Arc<MappedFile>] {
        &self.parts
    }

    /// All metadata, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, MetaValue> {
        &self.metadata
    }

    /// One metadata value.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// A string value, `None` when absent; an error when present with another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, LoadError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, v, "string")),
        }
    }

    /// An unsigned integer value, `None` when absent; an error when present with another type.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, LoadError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, v, "unsigned integer")),
        }
    }

    /// A float value (any numeric type), `None` when absent.
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>, LoadError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, v, "number")),
        }
    }

    /// A bool value, `None` when absent.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, LoadError> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| self.wrong_type(key, v, "bool")),
        }
    }

    /// The architecture named by `general.architecture`.
    pub fn architecture(&self) -> Result<&str, LoadError> {
        self.get_str("general.architecture")?.ok_or_else(|| {
            LoadError::field(&self.path, "metadata 'general.architecture' is missing")
        })
    }

    fn wrong_type(&self, key: &str, v: &MetaValue, want: &str) -> LoadError {
        LoadError::field(
            &self.path,
            format!(
                "metadata '{key}' is a {} ({v}), expected a {want}",
                v.type_name()
            ),
        )
    }

    /// The tensor table, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// One tensor's table entry.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// Borrows one tensor's bytes from the mapped file.
    pub fn tensor(&self, name: &str) -> Option<TensorView> {
        let info = self.tensor_info(name)?;
        Some(TensorView {
            name: info.name.clone(),
            format: info.format,
            shape: info.shape(),
            file: self.parts[info.part].clone(),
            offset: info.offset,
            size: info.size,
            scales: None,
        })
    }
}

/// Bounds-checked little-endian cursor over the file's bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn truncated(&self, what: &str, need: usize) -> LoadError {
        LoadError::malformed(
            self.path,
            format!(
                "truncated while reading {what}: needs {need} bytes at offset {}, file has {}",
                self.pos,
                self.bytes.len()
            ),
        )
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], LoadError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.truncated(what, n))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], LoadError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32, LoadError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64, LoadError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Rejects a count whose elements (each at least `min_size` bytes) cannot fit in the rest
    /// of the file, before anything is allocated for them.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<(), LoadError> {
        let left = (self.bytes.len() - self.pos) as u64;
        if count.checked_mul(min_size).is_none_or(|n| n > left) {
            return Err(LoadError::malformed(
                self.path,
                format!(
                    "{what} {count} is impossible: only {left} bytes remain at offset {} \
                     (truncated or corrupt file)",
                    self.pos
                ),
            ));
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String, LoadError> {
        let len = self.u64(what)?;
        self.check_count(len, 1, &format!("{what}: string length"))?;
        let bytes = self.take(len as usize, what)?;
        // Invalid UTF-8 is replaced rather than refused: llama.cpp accepts such vocabularies.
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<MetaValue, LoadError> {
        Ok(match ty {
            0 => MetaValue::U8(self.array::<1>(key)?[0]),
            1 => MetaValue::I8(self.array::<1>(key)?[0] as i8),
            2 => MetaValue::U16(u16::from_le_bytes(self.array(key)?)),
            3 => MetaValue::I16(i16::from_le_bytes(self.array(key)?)),
            4 => MetaValue::U32(u32::from_le_bytes(self.array(key)?)),
            5 => MetaValue::I32(i32::from_le_bytes(self.array(key)?)),
            6 => MetaValue::F32(f32::from_le_bytes(self.array(key)?)),
            7 => MetaValue::Bool(self.bool(key)?),
            8 => MetaValue::String(self.string(key)?),
            9 => MetaValue::Array(self.meta_array(key, depth)?),
            10 => MetaValue::U64(u64::from_le_bytes(self.array(key)?)),
            11 => MetaValue::I64(i64::from_le_bytes(self.array(key)?)),
            12 => MetaValue::F64(f64::from_le_bytes(self.array(key)?)),
            _ => {
                return Err(LoadError::malformed(
                    self.path,
                    format!("metadata '{key}' has unknown value type {ty}"),
                ))
            }
        })
    }

    fn bool(&mut self, key: &str) -> Result<bool, LoadError> {
        match self.array::<1>(key)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(LoadError::malformed(
                self.path,
                format!("metadata '{key}': bool byte {b} is neither 0 nor 1"),
            )),
        }
    }

    fn meta_array(&mut self, key: &str, depth: usize) -> Result<MetaArray, LoadError> {
        if depth >= MAX_ARRAY_DEPTH {
            return Err(LoadError::malformed(
                self.path,
                format!("metadata '{key}': arrays nested deeper than {MAX_ARRAY_DEPTH}"),
            ));
        }
        let ty = self.u32(key)?;
        let n = self.u64(key)?;
        let elem_size = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            _ => {
                return Err(LoadError::malformed(
                    self.path,
                    format!("metadata '{key}': array of unknown type {ty}"),
                ))
            }
        };
        self.check_count(n, elem_size, &format!("metadata '{key}': array length"))?;
        let n = n as usize;
        macro_rules! numbers {
            ($variant:ident, $t:ty) => {{
                let raw = self.take(n * std::mem::size_of::<$t>(), key)?;
                MetaArray::$variant(
                    raw.chunks_exact(std::mem::size_of::<$t>())
                        .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
                        .collect(),
                )
            }};
        }
        Ok(match ty {
            0 => MetaArray::U8(self.take(n, key)?.to_vec()),
            1 => numbers!(I8, i8),
            2 => numbers!(U16, u16),
            3 => numbers!(I16, i16),
            4 => numbers!(U32, u32),
            5 => numbers!(I32, i32),
            6 => numbers!(F32, f32),
            7 => MetaArray::Bool((0..n).map(|_| self.bool(key)).collect::<Result<_, _>>()?),
            8 => MetaArray::String((0..n).map(|_| self.string(key)).collect::<Result<_, _>>()?),
            9 => MetaArray::Array(
                (0..n)
                    .map(|_| self.meta_array(key, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            10 => numbers!(U64, u64),
            11 => numbers!(I64, i64),
            _ => numbers!(F64, f64),
        })
    }
}

#[cfg(test)]
mod tests;
