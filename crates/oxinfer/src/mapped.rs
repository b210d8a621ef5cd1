//! Read-only memory-mapped files and borrowed tensor views into them.

use crate::error::LoadError;
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A whole file, memory-mapped read-only and private (or held in memory when it cannot be
/// mapped, e.g. an empty file, bytes made in a test, or any file on a platform without mmap:
/// wasm32).
///
/// A mapping reads the file's pages on demand: if another process truncates the file while it
/// is mapped, touching a page past the new end raises SIGBUS, which kills the process. The
/// mapping is private (`MAP_PRIVATE`), so no write through it reaches the file, and
/// [`check_size`](Self::check_size) tells whether the file has shrunk since it was mapped
/// (the engine calls it before each prompt; see docs/security.md for what is left).
pub struct MappedFile {
    path: PathBuf,
    data: Backing,
    /// Whether the model this file belongs to stays within the memory rule with every
    /// packable tensor packed ([`oxinfer_kernels::packed::model_fits_packed`]), so that its
    /// growing formats are packed too; set by the loader once it knows the whole model.
    fits_packed: std::sync::atomic::AtomicBool,
}

enum Backing {
    /// The mapping, the open file behind it (for `fstat`) and its length when mapped.
    Map(memmap2::Mmap, std::fs::File),
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
                fits_packed: Default::default(),
            });
        }
        // SAFETY: `Mmap` hands out `&[u8]` for the mapping's life, which is sound only while
        // the bytes under it neither change nor vanish. The mapping is read-only and private
        // (MAP_PRIVATE), so nothing in this process writes it. Another process can still
        // rewrite the file in place (on Linux a private mapping shows those writes on pages not
        // yet copied: the slice changes under us) or truncate it (a read past the new end
        // raises SIGBUS). Neither can be prevented for an ordinary file; both are outside the
        // contract: model files must not be modified in place while loaded (replacing them by
        // rename is fine: the old inode stays mapped). Truncation is detected: the length is
        // checked against every header at load and `check_size` re-checks it before each
        // prompt, refusing with an error instead of crashing (docs/security.md).
        let data = match unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) } {
            Ok(map) => Backing::Map(map, file),
            // No mmap on this platform (wasm32-wasi): the file is read into memory instead.
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                Backing::Owned(read_whole(file, meta.len()).map_err(|e| LoadError::io(path, e))?)
            }
            Err(e) => return Err(LoadError::io(path, e)),
        };
        Ok(MappedFile {
            path: path.to_path_buf(),
            data,
            fits_packed: Default::default(),
        })
    }

    /// Checks that the mapped file still holds every byte the mapping covers (`fstat` on the
    /// open file: microseconds). An error names the file and the sizes when it has shrunk
    /// (truncated or rewritten in place while in use): reading the missing pages would kill the
    /// process with SIGBUS. Always `Ok` for bytes held in memory.
    pub fn check_size(&self) -> Result<(), LoadError> {
        let Backing::Map(map, file) = &self.data else {
            return Ok(());
        };
        let now = file
            .metadata()
            .map_err(|e| LoadError::io(&self.path, e))?
            .len();
        if now < map.len() as u64 {
            return Err(LoadError::malformed(
                &self.path,
                format!(
                    "the file shrank from {} to {now} bytes while loaded (truncated or \
                     rewritten in place); its weights can no longer be read safely: restore the \
                     file and load the model again",
                    map.len()
                ),
            ));
        }
        Ok(())
    }

    /// Wraps bytes already in memory (tests, generated files).
    pub fn from_bytes(path: impl Into<PathBuf>, bytes: Vec<u8>) -> Self {
        MappedFile {
            path: path.into(),
            data: Backing::Owned(bytes),
            fits_packed: Default::default(),
        }
    }

    /// Records whether the model this file belongs to fits the memory rule with every
    /// packable tensor packed ([`oxinfer_kernels::packed::model_fits_packed`]).
    pub fn set_fits_packed(&self, fits: bool) {
        self.fits_packed
            .store(fits, std::sync::atomic::Ordering::Relaxed);
    }

    /// What [`set_fits_packed`](Self::set_fits_packed) recorded (false until then).
    pub fn fits_packed(&self) -> bool {
        self.fits_packed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.data {
            Backing::Map(m, _) => m,
            Backing::Owned(v) => v,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the bytes are a memory mapping of the file (not a copy held in memory).
    pub fn is_mapped(&self) -> bool {
        matches!(self.data, Backing::Map(..))
    }

    /// Drops the pages of bytes `offset .. offset + len` from this process's resident memory
    /// (`MADV_DONTNEED`; a later read maps them back in from the file). For bytes whose
    /// contents now live elsewhere (repacked weights). A no-op for bytes held in memory;
    /// failures are ignored (it is only advice).
    pub fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        if let Backing::Map(m, _) = &self.data {
            // SAFETY: the mapping is read-only and private and never written, so its pages
            // always equal the file's: MADV_DONTNEED only drops them and a later read faults
            // the same bytes back in; no live reference ever sees different contents.
            let _ = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
            };
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }
}

/// The whole of `file` (`len` bytes by its metadata) read into memory, for platforms without
/// memory mapping.
fn read_whole(mut file: std::fs::File, len: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A byte range of a mapped file (the scales buffer of a split-format tensor).
#[derive(Clone)]
pub(crate) struct Span {
    pub(crate) file: Arc<MappedFile>,
    pub(crate) offset: usize,
    pub(crate) size: usize,
}

impl Span {
    fn bytes(&self) -> &[u8] {
        &self.file.bytes()[self.offset..self.offset + self.size]
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
    /// The scales buffer of a split format (`Q8`, `Q4`); `None` for every other format.
    pub(crate) scales: Option<Span>,
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

    /// The per-block scales of a split format (`Q8`, `Q4`), rows back to back; empty for
    /// formats that keep their scales inside their blocks.
    pub fn scales_bytes(&self) -> &[u8] {
        self.scales.as_ref().map_or(&[], Span::bytes)
    }

    /// Whether the tensor's bytes (and scales) are borrowed from a memory-mapped file rather
    /// than held in memory (on-load conversion, test bytes).
    pub fn is_mapped(&self) -> bool {
        self.file.is_mapped() && self.scales.as_ref().is_none_or(|s| s.file.is_mapped())
    }

    /// A tensor whose bytes are held in memory (made by on-load conversion): `data` in `format`
    /// and, for a split format, its `scales`. `origin` names the file it came from in errors.
    pub fn from_owned(
        origin: &Path,
        name: &str,
        format: WeightFormat,
        shape: Vec<usize>,
        data: Vec<u8>,
        scales: Vec<u8>,
    ) -> TensorView {
        let size = data.len();
        let file = Arc::new(MappedFile::from_bytes(origin, data));
        let scales = (!scales.is_empty()).then(|| Span {
            size: scales.len(),
            file: Arc::new(MappedFile::from_bytes(origin, scales)),
            offset: 0,
        });
        TensorView {
            name: name.to_string(),
            format,
            shape,
            file,
            offset: 0,
            size,
            scales,
        }
    }

    /// An f32 tensor held in memory: `values` (row-major `shape`, made by a transformation at
    /// load); `origin` names the file it came from in errors.
    pub fn from_f32(origin: &Path, name: &str, shape: Vec<usize>, values: &[f32]) -> TensorView {
        let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self::from_owned(origin, name, WeightFormat::F32, shape, bytes, Vec::new())
    }

    /// `[rows, cols]` of the tensor seen as a matrix: the last dimension is `cols`, the others
    /// multiply into `rows` (a vector is one row).
    pub fn rows_cols(&self) -> (usize, usize) {
        let cols = self.shape.last().copied().unwrap_or(1);
        let rows = self.shape[..self.shape.len().saturating_sub(1)]
            .iter()
            .product();
        (rows, cols)
    }

    /// The tensor as the kernels see it (`[rows, cols]` per [`Self::rows_cols`]), its sizes
    /// checked.
    pub fn matrix(&self) -> Result<WeightMatrix<'_>, LoadError> {
        let (rows, cols) = self.rows_cols();
        WeightMatrix::new_split(self.format, self.bytes(), self.scales_bytes(), rows, cols)
            .map_err(|e| LoadError::tensor(self.path(), &self.name, e.to_string()))
    }

    /// Drops the mapped pages of rows `rows` of a matrix from resident memory (see
    /// [`MappedFile::release`]): for a weight repacked into a copy that replaces those rows,
    /// released slab by slab while it is packed.
    pub fn release_rows(&self, rows: std::ops::Range<usize>) {
        let n = self.shape.first().copied().unwrap_or(0).max(1);
        let span = |offset: usize, size: usize| {
            let per_row = size / n;
            (offset + rows.start * per_row, rows.len() * per_row)
        };
        let (o, l) = span(self.offset, self.size);
        self.file.release(o, l);
        if let Some(s) = &self.scales {
            let (o, l) = span(s.offset, s.size);
            s.file.release(o, l);
        }
    }

    /// Offset of the tensor's first byte in its file (or in-memory buffer).
    pub fn file_offset(&self) -> usize {
        self.offset
    }

    /// Offset of the scales' first byte in their file, for a split format.
    pub fn scales_file_offset(&self) -> Option<usize> {
        self.scales.as_ref().map(|s| s.offset)
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
        if self.format.is_split() {
            let m = self.matrix()?;
            for (r, dst) in out.chunks_exact_mut(m.cols.max(1)).enumerate() {
                m.dequantize_row_into(r, dst);
            }
            return Ok(out);
        }
        oxinfer_kernels::dequantize_row(self.format, self.bytes(), &mut out)
            .map_err(|e| LoadError::tensor(self.path(), &self.name, e.to_string()))?;
        Ok(out)
    }
}
