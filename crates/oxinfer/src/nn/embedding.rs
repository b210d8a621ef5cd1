//! Token embedding lookup from a table in any storage format, one row dequantized per token.

use crate::error::{Error, LoadError};
use crate::loader::TensorView;
use crate::nn::linear::{Linear, PackedSlot};
use crate::plan::EmbedOp;
use oxinfer_kernels::pool::for_each_mut;

/// An embedding table `[vocab, dim]`, borrowed from its file.
pub struct Embedding {
    table: TensorView,
    /// Number of rows (tokens).
    pub vocab: usize,
    /// Row length.
    pub dim: usize,
    /// Factor applied to every looked-up row (Gemma scales by √dim); 1 for most models.
    pub scale: f32,
    /// The packed copy of this same table made by the tied output head, read instead of the
    /// mapped bytes once it exists (the head drops the mapped pages when it packs).
    tied: Option<PackedSlot>,
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
            tied: None,
        })
    }

    /// Reads rows from `head`'s packed weight once the head has made it, when `head` is this
    /// very table (a tied output head); otherwise does nothing. Without this, lookups after
    /// packing fault the dropped pages back in and the table sits in memory twice.
    pub fn tie_to(&mut self, head: &Linear) {
        let (a, b) = (&self.table, head.weight());
        if a.path() == b.path() && a.file_offset() == b.file_offset() && a.format == b.format {
            self.tied = Some(head.packed_slot());
        }
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
        let packed = self
            .tied
            .as_ref()
            .and_then(|s| s.get())
            .and_then(Option::as_ref);
        let _prof = oxinfer_kernels::profile::scope(
            || "embedding".to_string(),
            (ids.len() * row_bytes) as u64,
            0,
        );
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(Error::Request(format!(
                "token id {id} is outside the vocabulary (size {})",
                self.vocab
            )));
        }
        // Rows in parts of 16 on the pool (a 512-token prompt of a 7B took 3 ms on one thread,
        // 8 % of its pass on an H200).
        const PART: usize = 16;
        let mut parts: Vec<&mut [f32]> = out.chunks_mut(PART * self.dim).collect();
        for_each_mut(&mut parts, |pi, part| {
            for (j, dst) in part.chunks_exact_mut(self.dim).enumerate() {
                let id = ids[pi * PART + j] as usize;
                match packed {
                    Some(p) => p.dequantize_row_into(id, dst),
                    None => m.dequantize_row_into(id, dst),
                }
                if self.scale != 1.0 {
                    dst.iter_mut().for_each(|v| *v *= self.scale);
                }
            }
        });
        Ok(out)
    }
}

impl EmbedOp for Embedding {
    fn forward(&self, ids: &[u32]) -> crate::error::Result<Vec<f32>> {
        Embedding::forward(self, ids)
    }
}
