//! One interface over GGUF and safetensors for fetching tensors by name.

use super::TensorView;
use crate::error::LoadError;
use crate::gguf::GgufFile;
use std::path::Path;

/// Something that holds named tensors (a GGUF file, a safetensors folder).
pub trait TensorStore {
    /// The file or folder, for error messages.
    fn path(&self) -> &Path;

    /// The tensor called `name`: `None` when absent, an error when present but unreadable.
    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>>;

    /// The tensor called `name`, or an error naming it when absent.
    fn require(&self, name: &str) -> Result<TensorView, LoadError> {
        self.get(name)
            .unwrap_or_else(|| Err(LoadError::tensor(self.path(), name, "missing")))
    }

    /// The tensor called `name` with exactly `shape` (row-major, outermost first).
    fn require_shape(&self, name: &str, shape: &[usize]) -> Result<TensorView, LoadError> {
        let t = self.require(name)?;
        if t.shape != shape {
            return Err(LoadError::tensor(
                self.path(),
                name,
                format!("shape {:?}, expected {:?}", t.shape, shape),
            ));
        }
        Ok(t)
    }
}

impl TensorStore for GgufFile {
    fn path(&self) -> &Path {
        GgufFile::path(self)
    }

    fn get(&self, name: &str) -> Option<Result<TensorView, LoadError>> {
        self.tensor(name).map(Ok)
    }
}

/// Either kind of weight file set, as opened for a model.
pub enum WeightSource {
    Gguf(GgufFile),
    Safetensors(super::safetensors::SafetensorsModel),
}

impl WeightSource {
    /// The store behind it.
    pub fn store(&self) -> &dyn TensorStore {
        match self {
            WeightSource::Gguf(g) => g,
            WeightSource::Safetensors(s) => s,
        }
    }

    /// Checks that no weight file has shrunk since it was mapped
    /// ([`MappedFile::check_size`](crate::mapped::MappedFile::check_size)).
    pub fn check_sizes(&self) -> Result<(), LoadError> {
        match self {
            WeightSource::Gguf(g) => g.parts().iter().try_for_each(|p| p.check_size()),
            WeightSource::Safetensors(s) => {
                s.files().iter().try_for_each(|f| f.mapped().check_size())
            }
        }
    }
}
