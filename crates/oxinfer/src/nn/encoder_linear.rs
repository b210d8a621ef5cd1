//! The linear layer of the encoders: an [`nn::Linear`](crate::nn::Linear) whose f32 / f16 /
//! bf16 weight is, on the CPU, prepared once for a GEMM made for the hundreds of tokens of an
//! encoder batch: widened and packed for the packed f32 GEMM
//! ([`oxinfer_kernels::packed::float`]), or, when asked (`OXINFER_INT16_GEMM=1`,
//! [`set_int16_gemm`](oxinfer_kernels::packed::float::int16::set_int16_gemm)) on an AVX2 or
//! AVX-512 VNNI CPU, rounded to int16 per row for the int16 GEMM
//! ([`oxinfer_kernels::packed::float::int16`]: twice the multiply-adds per instruction of f32,
//! 1.2e-4 relative rounding at 1,536 features).
//! Quantized weights, an installed backend that takes the product, and
//! `OXINFER_KERNELS=scalar` / `OXINFER_PACKED=0` go through `Linear` unchanged.
//!
//! A layer may clamp its input and its output ([`EncoderLinear::with_clamps`]: Gemma 4's
//! clippable linears), on every path.

use std::sync::OnceLock;

use oxinfer_kernels::packed::float::int16::{
    int16_gemm_pays, matmul_int16_packed_post, PackedInt16Matrix,
};
use oxinfer_kernels::packed::float::{
    float_packing_pays, matmul_float_packed_post, Epilogue, PackedFloatMatrix,
};

use crate::backend::{self, DeviceWeight};
use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use crate::nn::moe::expert_rows;
use crate::nn::Linear;

/// A weight prepared for one of the CPU's encoder GEMMs.
enum Packed {
    /// Widened to f32, for the packed f32 GEMM.
    F32(PackedFloatMatrix),
    /// Rounded to int16 per row, for the int16 GEMM.
    Int16(PackedInt16Matrix),
}

impl Packed {
    /// `y = x Wᵀ (+ bias)`, then `post`, on this weight's GEMM.
    fn matmul(
        &self,
        x: &[f32],
        t: usize,
        bias: Option<&[f32]>,
        y: &mut [f32],
        post: Option<Epilogue<'_>>,
    ) {
        match self {
            Packed::F32(p) => matmul_float_packed_post(p, x, t, bias, y, post),
            Packed::Int16(p) => matmul_int16_packed_post(p, x, t, bias, y, post),
        }
    }
}

/// A linear layer `y = clamp_out(clamp_in(x) Wᵀ + b)` with an encoder GEMM on the CPU (module
/// doc); without clamps `y = x Wᵀ + b`.
pub struct EncoderLinear {
    inner: Linear,
    /// `[min, max]` of the input and of the output (after the bias), when clamped.
    input_clamp: Option<[f32; 2]>,
    output_clamp: Option<[f32; 2]>,
    packed: OnceLock<Option<Packed>>,
    plan_dev: OnceLock<Option<DeviceWeight>>,
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
            input_clamp: None,
            output_clamp: None,
            packed: OnceLock::new(),
            plan_dev: OnceLock::new(),
        }
    }

    /// The layer with its input clamped to `input` (`[min, max]`) before the product and its
    /// output (after the bias) to `output`; `None`: not clamped.
    pub fn with_clamps(self, input: Option<[f32; 2]>, output: Option<[f32; 2]>) -> Self {
        EncoderLinear {
            input_clamp: input,
            output_clamp: output,
            ..self
        }
    }

    /// `[min, max]` of the input, when clamped.
    pub fn input_clamp(&self) -> Option<[f32; 2]> {
        self.input_clamp
    }

    /// `[min, max]` of the output (after the bias), when clamped.
    pub fn output_clamp(&self) -> Option<[f32; 2]> {
        self.output_clamp
    }

    /// Whether the input or the output is clamped.
    pub fn clamps(&self) -> bool {
        self.input_clamp.is_some() || self.output_clamp.is_some()
    }

    /// Where a backend keeps this weight's device state for whole encoder plans
    /// ([`crate::backend::Backend::run_encoder`]), made on first use; apart from the
    /// [`Linear`]'s own slot, which single products use, since a plan may keep another form
    /// (`None` inside: the backend declined it).
    pub fn plan_slot(&self) -> &OnceLock<Option<DeviceWeight>> {
        &self.plan_dev
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
        let clamped = self.clamped_input(x);
        let x = clamped.as_deref().unwrap_or(x);
        let Some(p) = self.packed_here(t) else {
            let mut y = self.inner.forward(x, t);
            self.clamp_output(&mut y);
            return y;
        };
        let mut y = vec![0f32; t * self.inner.n_out];
        match self.output_clamp {
            None => p.matmul(x, t, self.inner.bias(), &mut y, None),
            Some(_) => p.matmul(
                x,
                t,
                self.inner.bias(),
                &mut y,
                Some(&|v| self.clamp_output(v)),
            ),
        }
        y
    }

    /// [`Self::forward`] followed by the element-wise `post` (an activation) on the result; on
    /// the packed path inside the matmul's own pool tasks
    /// ([`matmul_float_packed_post`]), so it costs no parallel region of its own.
    pub fn forward_then(&self, x: &[f32], t: usize, post: Epilogue<'_>) -> Vec<f32> {
        let clamped = self.clamped_input(x);
        let x = clamped.as_deref().unwrap_or(x);
        let then = |v: &mut [f32]| {
            self.clamp_output(v);
            post(v);
        };
        let Some(p) = self.packed_here(t) else {
            let mut y = self.inner.forward(x, t);
            then(&mut y);
            return y;
        };
        let mut y = vec![0f32; t * self.inner.n_out];
        p.matmul(x, t, self.inner.bias(), &mut y, Some(&then));
        y
    }

    /// A clamped copy of `x` when the input is clamped.
    fn clamped_input(&self, x: &[f32]) -> Option<Vec<f32>> {
        let [lo, hi] = self.input_clamp?;
        Some(x.iter().map(|v| v.clamp(lo, hi)).collect())
    }

    /// `y` clamped in place when the output is clamped.
    fn clamp_output(&self, y: &mut [f32]) {
        if let Some([lo, hi]) = self.output_clamp {
            y.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
        }
    }

    /// Several layers over one input `x` `[t, n_in]` (a backend gets them as one batch, as
    /// [`Linear::forward_shared`], unless one clamps); returns each `[t, n_out]`.
    pub fn forward_shared(layers: &[&EncoderLinear], x: &[f32], t: usize) -> Vec<Vec<f32>> {
        let clamped = layers.iter().any(|l| l.clamps());
        if clamped || layers.iter().all(|l| l.packed_here(t).is_some()) {
            return layers.iter().map(|l| l.forward(x, t)).collect();
        }
        let inner: Vec<&Linear> = layers.iter().map(|l| &l.inner).collect();
        Linear::forward_shared(&inner, x, t)
    }

    /// The prepared weight (made on first call) when the product of `t` tokens runs on one of
    /// the CPU's encoder GEMMs here: no backend takes it and the format and kernel set allow it.
    fn packed_here(&self, t: usize) -> Option<&Packed> {
        let l = &self.inner;
        if !float_packing_pays(l.weight().format) {
            return None;
        }
        if backend::active().is_some_and(|b| b.wants(l.n_out, l.n_in, t)) {
            return None;
        }
        self.packed
            .get_or_init(|| {
                let m = l.matrix();
                let p = match int16_gemm_pays(m.format, m.cols) {
                    true => PackedInt16Matrix::pack(&m).map(Packed::Int16),
                    false => None,
                }
                .or_else(|| PackedFloatMatrix::pack(&m).map(Packed::F32));
                if p.is_some() {
                    l.weight().release_rows(0..l.n_out);
                }
                p
            })
            .as_ref()
    }
}

/// The matrix `name` (`[Σ rows, n_in]`) as `N` projections, part `i` borrowing the `rows[i]`
/// rows after those of parts `0 .. i` (fused query/key/value, fused gate/up), each with its
/// part of the bias (`{stem}bias`, `[Σ rows]`, when `name` is `{stem}weight` and the store
/// has it).
pub fn split_rows<const N: usize>(
    store: &dyn TensorStore,
    name: &str,
    rows: [usize; N],
    n_in: usize,
) -> Result<[EncoderLinear; N], LoadError> {
    let total: usize = rows.iter().sum();
    let fused = store.require_shape(name, &[total, n_in])?;
    let bias = match name
        .strip_suffix("weight")
        .map(|stem| format!("{stem}bias"))
    {
        Some(b) if store.get(&b).is_some() => Some(store.require_shape(&b, &[total])?.to_f32()?),
        _ => None,
    };
    // One "expert" of `total` rows: `expert_rows` borrows a row range of it.
    let stacked = TensorView {
        shape: vec![1, total, n_in],
        ..fused
    };
    let mut first = 0;
    let mut parts = Vec::with_capacity(N);
    for n in rows {
        let view = expert_rows(&stacked, 0, first, n)?;
        let b = bias.as_ref().map(|b| b[first..first + n].to_vec());
        parts.push(EncoderLinear::from_linear(Linear::from_view(view, b)?));
        first += n;
    }
    Ok(parts.try_into().unwrap_or_else(|_| unreachable!("N parts")))
}
