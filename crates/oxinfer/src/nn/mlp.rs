//! Gated MLP: `down(act(gate(x)) ⊙ up(x))` (SwiGLU with SiLU, GeGLU with tanh-GELU).

use super::Linear;
use crate::error::LoadError;
use crate::loader::TensorStore;

/// Activation applied to the gate projection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `x · sigmoid(x)`.
    Silu,
    /// GELU, tanh approximation.
    GeluTanh,
}

impl Activation {
    /// Applies the activation to one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::Silu => x / (1.0 + (-x).exp()),
            Activation::GeluTanh => {
                const C: f32 = 0.797_884_6; // sqrt(2/pi)
                0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
            }
        }
    }

    /// `g[i] = act(g[i]) · u[i]`: SIMD and parallel on the default kernel set (a few ulp
    /// from [`Activation::apply`]), exactly [`Activation::apply`] with `OXINFER_KERNELS=scalar`.
    pub fn apply_gated(self, g: &mut [f32], u: &[f32]) {
        use oxinfer_kernels::act::{gated_act, GateAct};
        use oxinfer_kernels::vecdot::{detected_isa, Isa};
        let isa = if oxinfer_kernels::kernel_set() == oxinfer_kernels::KernelSet::Scalar {
            Isa::Scalar
        } else {
            detected_isa()
        };
        let act = match self {
            Activation::Silu => GateAct::Silu,
            Activation::GeluTanh => GateAct::GeluTanh,
        };
        gated_act(act, g, u, isa);
    }
}

/// A gated MLP block.
pub struct GatedMlp {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
    pub act: Activation,
}

impl GatedMlp {
    /// Loads the three projections by name: gate and up `[ffn, dim]`, down `[dim, ffn]`.
    pub fn load(
        store: &dyn TensorStore,
        names: [&str; 3],
        dim: usize,
        ffn: usize,
        act: Activation,
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
        self.act.apply_gated(&mut g, &u);
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
        let act = match self.act {
            Activation::Silu => crate::backend::GateAct::Silu,
            Activation::GeluTanh => crate::backend::GateAct::GeluTanh,
        };
        let (g, u, d) = (
            self.gate.device_weight(b)?,
            self.up.device_weight(b)?,
            self.down.device_weight(b)?,
        );
        let mut y = vec![0f32; t * self.down.n_out];
        b.gated_mlp(x, t, g, u, d, act, &mut y).then_some(y)
    }
}
