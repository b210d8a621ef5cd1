//! Gated MLP: `down(act(gate(x)) ⊙ up(x))` (SwiGLU with SiLU, GeGLU with tanh-GELU).

use super::Linear;
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::plan::{MlpOp, MlpParts};
use oxinfer_kernels::act::{gated_act, GateAct};
use oxinfer_kernels::vecdot::{detected_isa, Isa};

/// A gated MLP block.
pub struct GatedMlp {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub act: GateAct,
}

impl GatedMlp {
    /// Loads the three projections by name: gate and up `[ffn, dim]`, down `[dim, ffn]`.
    pub fn load(
        store: &dyn TensorStore,
        names: [&str; 3],
        dim: usize,
        ffn: usize,
        act: GateAct,
    ) -> Result<Self, LoadError> {
        Ok(GatedMlp {
            gate: Linear::load(store, names[0], ffn, dim)?,
            up: Linear::load(store, names[1], ffn, dim)?,
            down: Linear::load(store, names[2], dim, ffn)?,
            act,
        })
    }

    /// `x` is `[t, dim]`; returns `[t, dim]`.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        if let Some(y) = self.forward_on_device(x, t) {
            return y;
        }
        let mut gu = Linear::forward_shared(&[&self.gate, &self.up], x, t);
        let u = gu.pop().unwrap_or_default();
        let mut g = gu.pop().unwrap_or_default();
        apply_gated(self.act, &mut g, &u);
        self.down.forward(&g, t)
    }

    /// The whole block on the installed backend (intermediates stay on the device), when it
    /// takes it.
    fn forward_on_device(&self, x: &[f32], t: usize) -> Option<Vec<f32>> {
        let b = crate::backend::active()?;
        let layers = [&self.gate, &self.up, &self.down];
        if layers
            .iter()
            .any(|l| l.has_bias() || !b.wants(l.n_out, l.n_in, t))
        {
            return None;
        }
        let (g, u, d) = (
            self.gate.device_weight(b)?,
            self.up.device_weight(b)?,
            self.down.device_weight(b)?,
        );
        let mut y = vec![0f32; t * self.down.n_out];
        b.gated_mlp(x, t, g, u, d, self.act, &mut y).then_some(y)
    }
}

/// `g[i] = act(g[i]) · u[i]`: SIMD and parallel on the default kernel set (a few ulp from
/// [`GateAct::apply`]), exactly [`GateAct::apply`] with `OXINFER_KERNELS=scalar`.
pub fn apply_gated(act: GateAct, g: &mut [f32], u: &[f32]) {
    let isa = if oxinfer_kernels::kernel_set() == oxinfer_kernels::KernelSet::Scalar {
        Isa::Scalar
    } else {
        detected_isa()
    };
    gated_act(act, g, u, isa);
}

impl MlpOp for GatedMlp {
    fn parts(&self) -> MlpParts<'_> {
        MlpParts {
            gate: &self.gate,
            up: &self.up,
            down: &self.down,
            act: self.act,
        }
    }

    fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        GatedMlp::forward(self, x, t)
    }
}
