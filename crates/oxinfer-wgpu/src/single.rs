//! Single kernels on host data, for the op tests against their CPU twins and for
//! measurements: each uploads its inputs, runs one kernel and reads the result back.

use crate::backend::WgpuBackend;
use crate::kernels::{self, RopeAt};
use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer_kernels::act::GateAct;

impl WgpuBackend {
    /// Runs `make(arena, constants)` over `x` at the start of the arena and `consts` in the
    /// constants buffer; returns the arena's first `x.len()` values (the kernels work in place).
    fn in_place(
        &self,
        x: &[f32],
        consts: &[f32],
        make: impl FnOnce(&wgpu::Buffer, &wgpu::Buffer) -> kernels::Dispatch,
    ) -> Result<Vec<f32>, String> {
        let mut sc = self.scratch();
        let a = sc.arena(&self.gpu, x.len());
        let c = sc.consts(&self.gpu, consts.len());
        self.gpu.write(&a, 0, x);
        self.gpu.write(&c, 0, consts);
        let mut out = vec![0f32; x.len()];
        self.gpu.run(&[make(&a, &c)], &mut [(&a, 0, &mut out)])?;
        Ok(out)
    }

    /// RMSNorm of every row (width `gain.len()`) of `x`: `x / sqrt(mean(x²) + eps) · gain`.
    ///
    /// # Errors
    /// A device failure.
    pub fn rms_norm(&self, x: &[f32], gain: &[f32], eps: f32) -> Result<Vec<f32>, String> {
        let (w, rows) = (gain.len(), x.len() / gain.len().max(1));
        self.in_place(x, gain, |a, c| {
            kernels::rms_norm(a, c, 0, 0, w, rows, 0, eps)
        })
    }

    /// RoPE over `x` `[t, heads, head_dim]` with per-row tables `cos`, `sin` `[t, half]`,
    /// pairs `(2j, 2j+1)` when `interleaved`, else `(j, j + half)`.
    ///
    /// # Errors
    /// A device failure.
    pub fn rope(
        &self,
        x: &[f32],
        (t, heads, head_dim): (usize, usize, usize),
        cos: &[f32],
        sin: &[f32],
        interleaved: bool,
    ) -> Result<Vec<f32>, String> {
        let half = cos.len() / t.max(1);
        let r = RopeAt {
            cos: 0,
            sin: cos.len(),
            half,
            interleaved,
        };
        let tables: Vec<f32> = cos.iter().chain(sin).copied().collect();
        self.in_place(x, &tables, |a, c| {
            kernels::rope(a, c, 0, t, heads, head_dim, r)
        })
    }

    /// `act(g) · u` element-wise.
    ///
    /// # Errors
    /// A device failure.
    pub fn gated_act(&self, g: &[f32], u: &[f32], act: GateAct) -> Result<Vec<f32>, String> {
        let gu: Vec<f32> = g.iter().chain(u).copied().collect();
        let n = g.len();
        let out = self.in_place(&gu, &[], |a, _| kernels::gated_act(a, 0, n, n, act))?;
        Ok(out[..n].to_vec())
    }

    /// `cap · tanh(x / cap)` element-wise.
    ///
    /// # Errors
    /// A device failure.
    pub fn softcap(&self, x: &[f32], cap: f32) -> Result<Vec<f32>, String> {
        self.in_place(x, &[], |a, _| kernels::softcap(a, 0, x.len(), cap))
    }

    /// `act(x)` element-wise with the encoder pass's activation kernel (`encoder.wgsl`).
    ///
    /// # Errors
    /// A device failure.
    pub fn encoder_act(&self, x: &[f32], act: EncoderAct) -> Result<Vec<f32>, String> {
        let n = x.len();
        self.in_place(x, &[0.0], |a, c| {
            kernels::enc_act(a, c, 0, n, n, None, Some(act), None)
        })
    }
}
