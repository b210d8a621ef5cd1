//! The linear layer of the encoders: an [`nn::Linear`](crate::nn::Linear) whose f32 / f16 /
//! bf16 weight is, on the CPU, widened and packed once for the packed float GEMM
//! ([`oxinfer_kernels::packed::float`]), the fast path for the hundreds of tokens of an
//! encoder batch. Quantized weights, an installed backend that takes the product, and
//! `OXINFER_KERNELS=scalar` / `OXINFER_PACKED=0` go through `Linear` unchanged.

use std::sync::OnceLock;

use oxinfer_kernels::packed::float::{
    float_packing_pays, matmul_float_packed_post, Epilogue, PackedFloatMatrix,
};

use crate::backend;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::nn::Linear;

/// A linear layer `y = x Wᵀ + b` with the packed float GEMM on the CPU.
pub struct EncoderLinear {
    inner: Linear,
    packed: OnceLock<Option<PackedFloatMatrix>>,
}

impl EncoderLinear {
    /// Loads `name` (`[n_out, n_in]`) and its bias, as [`Linear::load`].
    pub fn load(
        store: &dyn TensorStore,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Self, LoadError> {
        Ok(Self::from_linear(Linear::load(store, name, n_out, n_in)?))
    }

    /// Wraps a loaded layer.
    pub fn from_linear(inner: Linear) -> Self {
        EncoderLinear {
            inner,
            packed: OnceLock::new(),
        }
    }

    /// The wrapped layer.
    pub fn linear(&self) -> &Linear {
        &self.inner
    }

    /// Output features.
    pub fn n_out(&self) -> usize {
        self.inner.n_out
    }

    /// `x` is `[t, n_in]`; returns `[t, n_out]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let Some(p) = self.packed_here(t) else {
            return self.inner.forward(x, t);
        };
        let mut y = vec![0f32; t * self.inner.n_out];
        matmul_float_packed_post(p, x, t, self.inner.bias(), &mut y, None);
        y
    }

    /// [`Self::forward`] followed by the element-wise `post` (an activation) on the result; on
    /// the packed path inside the matmul's own pool tasks
    /// ([`matmul_float_packed_post`]), so it costs no parallel region of its own.
    pub fn forward_then(&self, x: &[f32], t: usize, post: Epilogue<'_>) -> Vec<f32> {
        let Some(p) = self.packed_here(t) else {
            let mut y = self.inner.forward(x, t);
            post(&mut y);
            return y;
        };
        let mut y = vec![0f32; t * self.inner.n_out];
        matmul_float_packed_post(p, x, t, self.inner.bias(), &mut y, Some(post));
        y
    }

    /// Several layers over one input `x` `[t, n_in]` (a backend gets them as one batch, as
    /// [`Linear::forward_shared`]); returns each `[t, n_out]`.
    pub fn forward_shared(layers: &[&EncoderLinear], x: &[f32], t: usize) -> Vec<Vec<f32>> {
        if layers.iter().all(|l| l.packed_here(t).is_some()) {
            return layers.iter().map(|l| l.forward(x, t)).collect();
        }
        let inner: Vec<&Linear> = layers.iter().map(|l| &l.inner).collect();
        Linear::forward_shared(&inner, x, t)
    }

    /// The packed weight (made on first call) when the product of `t` tokens runs on the CPU's
    /// packed float GEMM here: no backend takes it and the format and kernel set allow it.
    fn packed_here(&self, t: usize) -> Option<&PackedFloatMatrix> {
        let l = &self.inner;
        if !float_packing_pays(l.weight().format) {
            return None;
        }
        if backend::active().is_some_and(|b| b.wants(l.n_out, l.n_in, t)) {
            return None;
        }
        self.packed
            .get_or_init(|| {
                let p = PackedFloatMatrix::pack(&l.matrix());
                if p.is_some() {
                    l.weight().release_rows(0..l.n_out);
                }
                p
            })
            .as_ref()
    }
}
