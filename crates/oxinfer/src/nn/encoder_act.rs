//! The activations of the encoders' MLPs (`hidden_act` of BERT-style configs), on the CPU.

use std::path::Path;

use crate::error::LoadError;
use crate::nn::encoder_math;

/// The activation of the MLP (`hidden_act`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncoderAct {
    /// `gelu`: exact GELU `0.5 · x · (1 + erf(x / √2))`.
    GeluErf,
    /// `gelu_new` / `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
    /// `silu` (`x · sigmoid(x)`).
    Silu,
}

impl EncoderAct {
    /// The activation `hidden_act` names (`gelu`, `gelu_new` / `gelu_pytorch_tanh` /
    /// `gelu_fast`, `relu`, `silu` / `swish`), if supported.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "gelu" => EncoderAct::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => EncoderAct::GeluTanh,
            "relu" => EncoderAct::Relu,
            "silu" | "swish" => EncoderAct::Silu,
            _ => return None,
        })
    }

    /// [`Self::parse`], or an error naming the `hidden_act` field of `path`.
    pub fn from_name(path: &Path, name: &str) -> Result<Self, LoadError> {
        Self::parse(name).ok_or_else(|| {
            LoadError::field(
                path,
                format!("hidden_act '{name}' is not supported (gelu, gelu_new, relu, silu)"),
            )
        })
    }

    /// The activation over `h` in place (times `up`, elementwise, for a gated MLP:
    /// `act(h) · up`), in parallel parts.
    pub fn apply_all(self, h: &mut [f32], up: Option<&[f32]>) {
        const PART: usize = 16 * 1024;
        let mut parts: Vec<&mut [f32]> = h.chunks_mut(PART).collect();
        oxinfer_kernels::pool::for_each_mut(&mut parts, |i, part| {
            self.apply_times(part, up.map(|u| &u[i * PART..]))
        });
    }

    /// The activation over `h` in place, on the calling thread.
    pub fn apply_slice(self, h: &mut [f32]) {
        self.apply_times(h, None);
    }

    /// `h[j] = act(h[j])`, times `up[j]` when there is an `up`; one loop per activation, so that
    /// each vectorizes.
    fn apply_times(self, h: &mut [f32], up: Option<&[f32]>) {
        match self {
            EncoderAct::GeluErf => apply_part(h, up, encoder_math::gelu_erf),
            EncoderAct::GeluTanh => apply_part(h, up, gelu_tanh),
            EncoderAct::Relu => apply_part(h, up, |x| x.max(0.0)),
            EncoderAct::Silu => apply_part(h, up, silu),
        }
    }

    /// The activation of one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            EncoderAct::GeluErf => encoder_math::gelu_erf(x),
            EncoderAct::GeluTanh => gelu_tanh(x),
            EncoderAct::Relu => x.max(0.0),
            EncoderAct::Silu => silu(x),
        }
    }
}

/// `h[j] = act(h[j])`, times `up[j]` when there is an `up` (a gated MLP's part).
#[inline(always)]
fn apply_part(h: &mut [f32], up: Option<&[f32]>, act: impl Fn(f32) -> f32) {
    match up {
        None => h.iter_mut().for_each(|v| *v = act(*v)),
        Some(u) => h.iter_mut().zip(u).for_each(|(v, &u)| *v = act(*v) * u),
    }
}

/// GELU's tanh form, `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`, with the
/// vectorizable [`encoder_math::tanh`].
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // √(2/π)
    0.5 * x * (1.0 + encoder_math::tanh(C * (x + 0.044_715 * x * x * x)))
}

/// `x · sigmoid(x)` with the vectorizable [`encoder_math::exp`].
#[inline(always)]
fn silu(x: f32) -> f32 {
    x / (1.0 + encoder_math::exp(-x))
}
