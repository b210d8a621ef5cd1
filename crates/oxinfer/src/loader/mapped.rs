//! Read-only memory-mapped files and borrowed tensor views into them.

use crate::error::LoadError;
use oxinfer_kernels::WeightFormat;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A whole file, memory-mapped read-only (or held in memory when it cannot be mapped, e.g. an
/// empty file or bytes made in a test).
pub struct MappedFile {
    path: PathBuf,
    data: Backing,
}

enum Backing {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl MappedFile {
    /// Maps `path` read-only.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let file = std::fs::File::open(path).map_err(|e| LoadError::io(path, e))?;
        let meta = file.metadata().map_err(|e| LoadError::io(path, e))?;
        if meta.is_dir() {
            return Err(LoadError::malformed(
                path,
                "is a directory, expected a file",
            ));
        }
        if meta.len() == 0 {
            return Ok(MappedFile {
                path: path.to_path_buf(),
                data: Backing::Owned(Vec::new()),
            });
        }
        // SAFETY: the mapping is read-only and private to this process; like every mmap-based
        // loader we rely on model files not being truncated or rewritten while in use.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| LoadError::io(path, e))?;
        Ok(MappedFile {
            path: path.to_path_buf(),
            data: Backing::Map(map),
        })
    }

    /// Wraps bytes already in memory (tests, generated files).
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Self {
        MappedFile {
            path: path.into(),
            data: Backing::Owned(bytes),
        }
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Map(m) => m,
            Backing::Owned(v) => v,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A tensor borrowed from a mapped file: no bytes are copied until a kernel reads them.
#[derive(Clone)]
pub struct TensorView {
    /// The tensor's name in its file.
    pub name: String,
    /// Storage format of the elements.
    pub format: WeightFormat,
    /// Row-major shape, outermost first (`[n_out, n_in]` for a weight matrix).
    pub shape: Vec<usize>,
    pub(crate) file: Arc<MappedFile>,
    pub(crate) offset: usize,
    pub(crate) size: usize,
}

impl std::fmt::Debug for TensorView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?} {}", self.name, self.shape, self.format.name())
    }
}

impl TensorView {
    /// The tensor's raw bytes in its storage format.
    pub fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.offset..self.offset + self.size]
    }

    /// The file the tensor lives in.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Dequantizes (or converts) the whole tensor to f32, row-major.
    pub fn to_f32(&self) -> Result<Vec<f32>, LoadError> {
        let n = self.numel();
        let mut out = vec![0f32; n];
        oxinfer_kernels::dequantize_row(self.format, self.bytes(), &mut out)
            .map_err(|e| LoadError::tensor(self.path(), &self.name, e.to_string()))?;
        Ok(out)
    }
}
