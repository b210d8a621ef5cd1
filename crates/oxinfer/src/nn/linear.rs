//! Linear layer `y = x Wᵀ + b` over a weight matrix in any storage format.

use crate::backend::{self, Backend, DeviceWeight, Job, Weight};
use crate::error::LoadError;
use crate::loader::{TensorStore, TensorView};
use crate::plan::ProjOp;
use oxinfer_kernels::packed::float::{
    float_packing_pays, matmul_float_packed, pack_for_call, PackedFloatMatrix,
    PACK_FOR_CALL_MIN_ROWS,
};
use oxinfer_kernels::packed::{matmul_packed, matmul_packed_shared, packing_pays_in, PackedMatrix};
use oxinfer_kernels::two_term;
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::sync::{Arc, OnceLock};

/// A linear layer whose weight `[n_out, n_in]` stays in its file's format (borrowed, not copied).
pub struct Linear {
    weight: TensorView,
    bias: Option<Vec<f32>>,
    /// Output features.
    pub n_out: usize,
    /// Input features.
    pub n_in: usize,
    /// The weight on the installed backend, uploaded on first use (`None` inside when the
    /// backend declined it).
    device: OnceLock<Option<DeviceWeight>>,
    /// The weight repacked for the CPU's packed GEMM, made on first CPU use (`None` inside
    /// when the format or CPU has no packed kernel); once made it replaces the mapped bytes,
    /// whose pages are dropped from resident memory.
    packed: PackedSlot,
    /// An f32 weight in the packed f32 GEMM's panels, made by the first [`Self::forward_wide`]
    /// on the CPU (`None` inside where that GEMM does not run); like `packed`, it replaces the
    /// mapped bytes in resident memory.
    float_packed: OnceLock<Option<PackedFloatMatrix>>,
}

/// Where a [`Linear`] keeps its packed weight, shared with an [`crate::nn::Embedding`] that
/// reads the same table (tied embeddings) so that lookups read the packed copy once it exists.
pub type PackedSlot = Arc<OnceLock<Option<PackedMatrix>>>;

impl Linear {
    /// Loads `name` (shape `[n_out, n_in]`) and, when present, the bias named by replacing the
    /// `weight` suffix with `bias`.
    pub fn load(
        store: &dyn TensorStore,
        name: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Self, LoadError> {
        let weight = store.require_shape(name, &[n_out, n_in])?;
        let bias = match name.strip_suffix("weight") {
            Some(stem) => match store.get(&format!("{stem}bias")) {
                Some(b) => {
                    let b = b?;
                    if b.shape != [n_out] {
                        return Err(LoadError::tensor(
                            store.path(),
                            &b.name,
                            format!("shape {:?}, expected [{n_out}]", b.shape),
                        ));
                    }
                    Some(b.to_f32()?)
                }
                None => None,
            },
            None => None,
        };
        Self::from_view(weight, bias)
    }

    /// Wraps a weight already fetched (e.g. a tied embedding table used as the output head).
    pub fn from_view(weight: TensorView, bias: Option<Vec<f32>>) -> Result<Self, LoadError> {
        let (n_out, n_in) = match weight.shape[..] {
            [o, i] => (o, i),
            _ => {
                return Err(LoadError::tensor(
                    weight.path(),
                    &weight.name,
                    format!("expected a matrix, shape is {:?}", weight.shape),
                ))
            }
        };
        weight.matrix()?;
        Ok(Linear {
            weight,
            bias,
            n_out,
            n_in,
            device: OnceLock::new(),
            packed: Arc::new(OnceLock::new()),
            float_packed: OnceLock::new(),
        })
    }

    /// The weight as the kernels see it.
    pub fn matrix(&self) -> WeightMatrix<'_> {
        WeightMatrix {
            format: self.weight.format,
            data: self.weight.bytes(),
            scales: self.weight.scales_bytes(),
            rows: self.n_out,
            cols: self.n_in,
        }
    }

    /// The weight tensor.
    pub fn weight(&self) -> &TensorView {
        &self.weight
    }

    /// `x` is `[t, n_in]`; returns `[t, n_out]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = vec![0f32; t * self.n_out];
        self.forward_into(x, t, &mut y);
        y
    }

    /// [`Self::forward`] for a layer run over many rows at a time (a diffusion model's or a
    /// text encoder's linear layers over every pixel or token): on the CPU a float weight is
    /// multiplied on the packed f32 GEMM. An f32 weight is packed on the first such call and kept
    /// packed (its mapped pages are dropped from resident memory, so it is not held twice);
    /// f16 / bf16 weights are packed per call ([`oxinfer_kernels::packed::float::pack_for_call`]),
    /// as f32 panels would double their memory. Otherwise (fewer than
    /// [`PACK_FOR_CALL_MIN_ROWS`] rows, a quantized weight, a backend, an exact matmul) as
    /// [`Self::forward`].
    pub fn forward_wide(&self, x: &[f32], t: usize) -> Vec<f32> {
        let on_cpu = t >= PACK_FOR_CALL_MIN_ROWS
            && backend::active().is_none()
            && !super::exact_matmuls::is_exact(&self.weight.name)
            && super::exact_matmuls::sim_block(&self.weight.name).is_none();
        if !on_cpu || !float_packing_pays(self.weight.format) {
            return self.forward(x, t);
        }
        let per_call;
        let p = if self.weight.format == WeightFormat::F32 {
            let kept = self.float_packed.get_or_init(|| {
                let p = PackedFloatMatrix::pack(&self.matrix());
                if p.is_some() {
                    self.weight.release_rows(0..self.n_out);
                }
                p
            });
            kept.as_ref()
        } else {
            per_call = pack_for_call(&self.matrix(), t);
            per_call.as_ref()
        };
        let Some(p) = p else {
            return self.forward(x, t);
        };
        let mut y = vec![0f32; t * self.n_out];
        matmul_float_packed(p, x, t, &mut y);
        self.add_bias(&mut y);
        y
    }

    /// `x` is `[t, n_in]`, `y` is `[t, n_out]` (overwritten).
    pub fn forward_into(&self, x: &[f32], t: usize, y: &mut [f32]) {
        debug_assert_eq!(x.len(), t * self.n_in);
        debug_assert_eq!(y.len(), t * self.n_out);
        if super::exact_matmuls::is_exact(&self.weight.name) {
            oxinfer_kernels::matmul_reference(&self.matrix(), x, t, y);
        } else if let Some(block) = super::exact_matmuls::sim_block(&self.weight.name) {
            let xq = super::exact_matmuls::sim_round(x, block);
            oxinfer_kernels::matmul_reference(&self.matrix(), &xq, t, y);
        } else if !self.forward_on_device(x, t, y) {
            self.forward_cpu(x, t, y);
        }
        self.add_bias(y);
    }

    /// The product on the CPU kernels (packed where that pays), with two-term activations
    /// where `OXINFER_TWO_TERM_MATMULS` names this weight and the kernels round activations to
    /// int8.
    fn forward_cpu(&self, x: &[f32], t: usize, y: &mut [f32]) {
        let run = |x: &[f32], t: usize, y: &mut [f32]| match self.packed() {
            Some(p) => matmul_packed(p, x, t, y),
            None => oxinfer_kernels::matmul(&self.matrix(), x, t, y),
        };
        let format = self.weight.format;
        if super::exact_matmuls::is_two_term(&self.weight.name)
            && oxinfer_kernels::kernel_set() == oxinfer_kernels::KernelSet::Auto
            && two_term::rounds_activations(format)
        {
            let x2 = two_term::split_two_term(format, x, t, self.n_in);
            let mut y2 = vec![0f32; 2 * t * self.n_out];
            run(&x2, 2 * t, &mut y2);
            two_term::sum_two_term(&y2, t, self.n_out, y);
        } else {
            run(x, t, y);
        }
    }

    /// Runs several layers over one input `x` `[t, n_in]`; returns each `[t, n_out]`. A backend
    /// gets them as one batch (the input travels once).
    pub fn forward_shared(layers: &[&Linear], x: &[f32], t: usize) -> Vec<Vec<f32>> {
        let mut ys: Vec<Vec<f32>> = layers.iter().map(|l| vec![0f32; t * l.n_out]).collect();
        let active = backend::active();
        let on_device = active.is_some_and(|b| {
            let devs: Option<Vec<&DeviceWeight>> = layers
                .iter()
                .map(|l| {
                    b.wants(l.n_out, l.n_in, t)
                        .then(|| l.on_device(b))
                        .flatten()
                })
                .collect();
            let Some(devs) = devs else { return false };
            let mut jobs: Vec<Job> = layers
                .iter()
                .zip(devs)
                .zip(ys.iter_mut())
                .map(|((l, dev), y)| Job {
                    w: l.matrix(),
                    dev,
                    y,
                })
                .collect();
            layers.iter().all(|l| l.n_in == layers[0].n_in)
                && b.matmul(x, t, layers[0].n_in, &mut jobs)
        });
        if !on_device {
            // On the CPU, layers whose products are plain packed ones share one rounding of
            // `x` and one parallel region (bit-identical to one product each).
            // (With a backend installed, each layer may still go to it on its own.)
            let packed: Option<Vec<&PackedMatrix>> = match active {
                Some(_) => None,
                None => layers.iter().map(|l| l.plain_packed()).collect(),
            };
            if let Some(ws) = packed.filter(|ws| ws.len() > 1) {
                let mut outs: Vec<&mut [f32]> = ys.iter_mut().map(|y| y.as_mut_slice()).collect();
                matmul_packed_shared(&ws, x, t, &mut outs);
            } else {
                for (l, y) in layers.iter().zip(ys.iter_mut()) {
                    l.forward_into(x, t, y);
                }
                return ys;
            }
        }
        for (l, y) in layers.iter().zip(ys.iter_mut()) {
            l.add_bias(y);
        }
        ys
    }

    /// The packed weight when this layer's CPU product is exactly [`matmul_packed`] on it: no
    /// debug switch (`OXINFER_EXACT_MATMULS`, `OXINFER_TWO_TERM_MATMULS`) names it.
    fn plain_packed(&self) -> Option<&PackedMatrix> {
        if super::exact_matmuls::is_exact(&self.weight.name)
            || super::exact_matmuls::is_two_term(&self.weight.name)
            || super::exact_matmuls::sim_block(&self.weight.name).is_some()
        {
            return None;
        }
        self.packed()
    }

    /// The weight repacked for the CPU's packed kernels (made on first call), or `None` when
    /// they do not pay here (format, CPU, `OXINFER_KERNELS=scalar`).
    fn packed(&self) -> Option<&PackedMatrix> {
        if !packing_pays_in(self.weight.format, self.weight.file.fits_packed()) {
            return None;
        }
        self.packed
            .get_or_init(|| {
                PackedMatrix::pack_releasing(&self.matrix(), &mut |rows| {
                    self.weight.release_rows(rows)
                })
            })
            .as_ref()
    }

    /// The slot the packed weight goes in (made on first CPU use), for an embedding table that
    /// is this same tensor.
    pub fn packed_slot(&self) -> PackedSlot {
        Arc::clone(&self.packed)
    }

    /// The weight on backend `b`, uploaded on first use; `None` when `b` declined it.
    pub fn on_device(&self, b: &dyn Backend) -> Option<&DeviceWeight> {
        self.device
            .get_or_init(|| b.upload(&self.matrix()))
            .as_ref()
    }

    /// The weight with its device state on `b`, for fused backend ops.
    pub fn device_weight(&self, b: &dyn Backend) -> Option<Weight<'_>> {
        let dev = self.on_device(b)?;
        Some(Weight {
            w: self.matrix(),
            dev,
        })
    }

    /// The bias `[n_out]`, if any.
    pub fn bias(&self) -> Option<&[f32]> {
        self.bias.as_deref()
    }

    /// Whether the layer has a bias.
    pub fn has_bias(&self) -> bool {
        self.bias.is_some()
    }

    fn add_bias(&self, y: &mut [f32]) {
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(self.n_out) {
                for (v, bv) in row.iter_mut().zip(b) {
                    *v += bv;
                }
            }
        }
    }

    /// Offers the matmul to the installed backend; false when it is not taken.
    fn forward_on_device(&self, x: &[f32], t: usize, y: &mut [f32]) -> bool {
        let Some(b) = backend::active() else {
            return false;
        };
        if !b.wants(self.n_out, self.n_in, t) {
            return false;
        }
        let Some(dev) = self.on_device(b) else {
            return false;
        };
        b.matmul(
            x,
            t,
            self.n_in,
            &mut [Job {
                w: self.matrix(),
                dev,
                y,
            }],
        )
    }
}

impl ProjOp for Linear {
    fn matrix(&self) -> WeightMatrix<'_> {
        Linear::matrix(self)
    }

    fn bias(&self) -> Option<&[f32]> {
        Linear::bias(self)
    }

    fn device_slot(&self) -> &OnceLock<Option<DeviceWeight>> {
        &self.device
    }

    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        Linear::forward(self, x, t)
    }
}
