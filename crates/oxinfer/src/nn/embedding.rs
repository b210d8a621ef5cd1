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
        table.matrix()?;
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
        let m = self.table.matrix()?;
        let row_bytes = m.row_bytes() + m.row_scale_bytes();
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
            m.dequantize_row_into(id, dst);
            if self.scale != 1.0 {
                dst.iter_mut().for_each(|v| *v *= self.scale);
            }
        }
        Ok(out)
    }
}
