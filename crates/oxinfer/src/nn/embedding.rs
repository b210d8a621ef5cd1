//! Token embedding lookup from a table in any storage format, one row dequantized per token.

use crate::error::{Error, LoadError};
use crate::loader::TensorView;

/// An embedding table `[vocab, dim]`, borrowed from its file.
pub struct Embedding {
    table: TensorView,
    /// Number of rows (tokens).
    pub vocab: usize,
    /// Row length.
    pub dim: usize,
    /// Factor applied to every looked-up row (Gemma scales by √dim); 1 for most models.
    pub scale: f32,
}

impl Embedding {
    /// Wraps a `[vocab, dim]` table.
    pub fn new(table: TensorView, scale: f32) -> Result<Self, LoadError> {
        let (vocab, dim) = match table.shape[..] {
            [v, d] => (v, d),
            _ => {
                return Err(LoadError::tensor(
                    table.path(),
                    &table.name,
                    format!("expected [vocab, dim], shape is {:?}", table.shape),
                ))
            }
        };
        if table.format.row_bytes(dim).is_none() {
            return Err(LoadError::tensor(
                table.path(),
                &table.name,
                "row length is not a multiple of the block size",
            ));
        }
        Ok(Embedding {
            table,
            vocab,
            dim,
            scale,
        })
    }

    /// The table.
    pub fn table(&self) -> &TensorView {
        &self.table
    }

    /// Looks up `ids`, returning `[ids.len(), dim]`. Ids outside the vocabulary are an error.
    pub fn forward(&self, ids: &[u32]) -> Result<Vec<f32>, Error> {
        let row_bytes = self.table.format.row_bytes(self.dim).unwrap_or(0);
        let bytes = self.table.bytes();
        let mut out = vec![0f32; ids.len() * self.dim];
        let _prof = oxinfer_kernels::profile::scope(
            || "embedding".to_string(),
            (ids.len() * row_bytes) as u64,
            0,
        );
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(self.dim)) {
            let id = id as usize;
            if id >= self.vocab {
                return Err(Error::Request(format!(
                    "token id {id} is outside the vocabulary (size {})",
                    self.vocab
                )));
            }
            let src = &bytes[id * row_bytes..(id + 1) * row_bytes];
            oxinfer_kernels::dequantize_row(self.table.format, src, dst)
                .map_err(|e| Error::Request(format!("{}: {e}", self.table.name)))?;
            if self.scale != 1.0 {
                dst.iter_mut().for_each(|v| *v *= self.scale);
            }
        }
        Ok(out)
    }
}
