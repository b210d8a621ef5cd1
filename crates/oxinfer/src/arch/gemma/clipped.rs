//! Gemma 4's clippable linear layers (vision and audio towers): an optional clamp of the input
//! and of the output around a bias-free projection, the bounds stored as scalar tensors
//! `input_min`, `input_max`, `output_min`, `output_max` beside `linear.weight`. The audio tower
//! runs them as [`ClippedLinear`]s; the vision tower's blocks, an encoder plan, as
//! [`EncoderLinear`]s carrying the same clamps ([`load_encoder`]).

use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::Linear;

/// A projection `{stem}.linear.weight` with the clamps the checkpoint stores.
pub struct ClippedLinear {
    pub linear: Linear,
    /// `[min, max]` of the input, when stored.
    input: Option<[f32; 2]>,
    /// `[min, max]` of the output, when stored.
    output: Option<[f32; 2]>,
}

/// A scalar tensor `name`, when present.
fn scalar(store: &dyn TensorStore, name: &str) -> Result<Option<f32>, LoadError> {
    let Some(t) = store.get(name) else {
        return Ok(None);
    };
    let v = t?.to_f32()?;
    match v[..] {
        [s] => Ok(Some(s)),
        _ => Err(LoadError::tensor(
            store.path(),
            name,
            format!("{} values, expected 1", v.len()),
        )),
    }
}

/// The `[min, max]` pair `{stem}.{which}_min` / `_max`, when both are stored.
fn bounds(store: &dyn TensorStore, stem: &str, which: &str) -> Result<Option<[f32; 2]>, LoadError> {
    let lo = scalar(store, &format!("{stem}.{which}_min"))?;
    let hi = scalar(store, &format!("{stem}.{which}_max"))?;
    Ok(lo.zip(hi).map(|(a, b)| [a, b]))
}

/// `{stem}.linear.weight` (`[n_out, n_in]`) as an encoder plan's projection, with the clamps
/// the checkpoint stores ([`EncoderLinear::with_clamps`]).
pub fn load_encoder(
    store: &dyn TensorStore,
    stem: &str,
    n_out: usize,
    n_in: usize,
) -> Result<EncoderLinear, LoadError> {
    let linear = EncoderLinear::load(store, &format!("{stem}.linear.weight"), n_out, n_in)?;
    Ok(linear.with_clamps(
        bounds(store, stem, "input")?,
        bounds(store, stem, "output")?,
    ))
}

impl ClippedLinear {
    /// Loads `{stem}.linear.weight` (`[n_out, n_in]`) and its clamps.
    pub fn load(
        store: &dyn TensorStore,
        stem: &str,
        n_out: usize,
        n_in: usize,
    ) -> Result<Self, LoadError> {
        Ok(ClippedLinear {
            linear: Linear::load(store, &format!("{stem}.linear.weight"), n_out, n_in)?,
            input: bounds(store, stem, "input")?,
            output: bounds(store, stem, "output")?,
        })
    }

    /// `x` `[t, n_in]` → `[t, n_out]`, clamped before and after as stored.
    pub fn forward(&self, x: &[f32], t: usize) -> Vec<f32> {
        let mut y = match self.input {
            Some([lo, hi]) => {
                let xc: Vec<f32> = x.iter().map(|v| v.clamp(lo, hi)).collect();
                self.linear.forward(&xc, t)
            }
            None => self.linear.forward(x, t),
        };
        if let Some([lo, hi]) = self.output {
            y.iter_mut().for_each(|v| *v = v.clamp(lo, hi));
        }
        y
    }
}
