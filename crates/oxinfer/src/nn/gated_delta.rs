//! Gated DeltaNet token mixer (Qwen 3.5's linear-attention layers): a causal depthwise
//! convolution over the q/k/v projections (its last inputs carried across calls), SiLU,
//! L2-normalised q/k, per-head decay `g = -exp(A_log) · softplus(a + dt_bias)` and write
//! strength `beta = sigmoid(b)`, the gated delta rule on a `[k_dim, v_dim]` state per value head,
//! then a gated RMSNorm `norm(o) · w · silu(z)` and the output projection.
//!
//! Several tokens at once (prefill) use the chunked form of the delta rule (chunks of 64, a
//! unit-lower-triangular solve per chunk, as the reference implementation); one token uses the
//! recurrent form. Both compute the same thing.

use super::{Linear, SeqRows};
use crate::error::LoadError;
use crate::loader::TensorStore;
use crate::plan::RecurrentOp;

/// Tokens per chunk of the chunked delta rule.
pub const CHUNK: usize = 64;

/// Shape of a Gated DeltaNet layer.
#[derive(Clone, Copy, Debug)]
pub struct DeltaShape {
    pub dim: usize,
    /// Query/key heads and their dimension.
    pub n_k_heads: usize,
    pub k_dim: usize,
    /// Value heads (a multiple of the key heads) and their dimension.
    pub n_v_heads: usize,
    pub v_dim: usize,
    /// Convolution width.
    pub kernel: usize,
    pub norm_eps: f32,
    /// Value head `h` reads key head `h % n_k_heads` (llama.cpp's GGUF layout) instead of
    /// `h / (n_v_heads / n_k_heads)` (transformers).
    pub tiled_groups: bool,
}

impl DeltaShape {
    fn key_total(&self) -> usize {
        self.n_k_heads * self.k_dim
    }
    fn value_total(&self) -> usize {
        self.n_v_heads * self.v_dim
    }
    /// Channels of the convolution: q, k and v.
    pub fn conv_dim(&self) -> usize {
        2 * self.key_total() + self.value_total()
    }
    /// Sizes of the recurrent state: (convolution inputs, delta-rule matrices).
    pub fn state_sizes(&self) -> (usize, usize) {
        (
            (self.kernel - 1) * self.conv_dim(),
            self.n_v_heads * self.k_dim * self.v_dim,
        )
    }
    fn k_head_of(&self, vh: usize) -> usize {
        if self.tiled_groups {
            vh % self.n_k_heads
        } else {
            vh / (self.n_v_heads / self.n_k_heads)
        }
    }
}

/// Tensor names of one layer, in the store's spelling.
pub struct DeltaNames {
    pub qkv: String,
    pub z: String,
    pub b: String,
    pub a: String,
    pub conv: String,
    pub dt_bias: String,
    pub a_log: String,
    pub norm: String,
    pub out: String,
    /// The store holds `-exp(A_log)` (GGUF `ssm_a`) rather than `A_log`.
    pub a_is_negated_exp: bool,
}

/// One Gated DeltaNet layer.
pub struct GatedDeltaNet {
    qkv: Linear,
    z: Linear,
    b: Linear,
    a: Linear,
    /// `[conv_dim, kernel]`.
    conv: Vec<f32>,
    dt_bias: Vec<f32>,
    /// `-exp(A_log)` per value head.
    neg_a: Vec<f32>,
    norm: Vec<f32>,
    out: Linear,
    pub shape: DeltaShape,
}

impl GatedDeltaNet {
    pub fn load(store: &dyn TensorStore, n: &DeltaNames, s: DeltaShape) -> Result<Self, LoadError> {
        if s.n_k_heads == 0 || !s.n_v_heads.is_multiple_of(s.n_k_heads) || s.kernel == 0 {
            return Err(LoadError::field(
                store.path(),
                format!(
                    "linear attention: {} value heads are not a multiple of {} key heads",
                    s.n_v_heads, s.n_k_heads
                ),
            ));
        }
        let vec_of = |name: &str, len: usize| -> Result<Vec<f32>, LoadError> {
            let t = store.require(name)?;
            if t.shape.iter().product::<usize>() != len {
                return Err(LoadError::tensor(
                    store.path(),
                    name,
                    format!("shape {:?}, expected {len} values", t.shape),
                ));
            }
            t.to_f32()
        };
        let a = vec_of(&n.a_log, s.n_v_heads)?;
        let neg_a = if n.a_is_negated_exp {
            a
        } else {
            a.iter().map(|v| -v.exp()).collect()
        };
        Ok(GatedDeltaNet {
            qkv: Linear::load(store, &n.qkv, s.conv_dim(), s.dim)?,
            z: Linear::load(store, &n.z, s.value_total(), s.dim)?,
            b: Linear::load(store, &n.b, s.n_v_heads, s.dim)?,
            a: Linear::load(store, &n.a, s.n_v_heads, s.dim)?,
            conv: vec_of(&n.conv, s.conv_dim() * s.kernel)?,
            dt_bias: vec_of(&n.dt_bias, s.n_v_heads)?,
            neg_a,
            norm: vec_of(&n.norm, s.v_dim)?,
            out: Linear::load(store, &n.out, s.dim, s.value_total())?,
            shape: s,
        })
    }

    /// `h` is the normed input `[t, dim]` of every sequence stacked; updates each sequence's
    /// recurrent state of layer `layer` and returns the mixer output `[t, dim]`.
    pub fn forward(&self, h: &[f32], t: usize, layer: usize, seqs: &mut [SeqRows<'_>]) -> Vec<f32> {
        let s = &self.shape;
        let cd = s.conv_dim();
        let mut qkv = self.qkv.forward(h, t);
        let z = self.z.forward(h, t);
        let b = self.b.forward(h, t);
        let a = self.a.forward(h, t);
        let nv = s.n_v_heads;
        // beta and the log-space decay per token and value head.
        let beta: Vec<f32> = b.iter().map(|&x| sigmoid(x)).collect();
        let g: Vec<f32> = a
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let hh = i % nv;
                self.neg_a[hh] * softplus(x + self.dt_bias[hh])
            })
            .collect();
        let mut core = vec![0f32; t * s.value_total()];
        for sq in seqs.iter_mut() {
            let rows = sq.row..sq.row + sq.len;
            let st = &mut sq.cache.recurrent[layer];
            self.conv_silu(
                &mut qkv[rows.start * cd..rows.end * cd],
                sq.len,
                &mut st.conv,
            );
            self.delta_rule(
                &qkv[rows.start * cd..rows.end * cd],
                &g[rows.start * nv..rows.end * nv],
                &beta[rows.start * nv..rows.end * nv],
                sq.len,
                &mut st.state,
                &mut core[rows.start * s.value_total()..rows.end * s.value_total()],
            );
        }
        // Gated RMSNorm per value head.
        for (o, zz) in core.chunks_exact_mut(s.v_dim).zip(z.chunks_exact(s.v_dim)) {
            let ss: f32 = o.iter().map(|v| v * v).sum::<f32>() / s.v_dim as f32;
            let inv = 1.0 / (ss + s.norm_eps).sqrt();
            for ((v, &w), &zv) in o.iter_mut().zip(&self.norm).zip(zz) {
                *v = *v * inv * w * silu(zv);
            }
        }
        self.out.forward(&core, t)
    }

    /// Causal depthwise convolution then SiLU over `x` (`[t, conv_dim]`, in place), continuing
    /// from the previous `kernel - 1` inputs in `state` (updated).
    fn conv_silu(&self, x: &mut [f32], t: usize, state: &mut [f32]) {
        let cd = self.shape.conv_dim();
        let kk = self.shape.kernel;
        let keep = kk - 1;
        let mut ext = Vec::with_capacity((keep + t) * cd);
        ext.extend_from_slice(state);
        ext.extend_from_slice(x);
        for i in 0..t {
            let out = &mut x[i * cd..(i + 1) * cd];
            for (c, o) in out.iter_mut().enumerate() {
                let w = &self.conv[c * kk..(c + 1) * kk];
                let mut acc = 0f32;
                for (j, &wj) in w.iter().enumerate() {
                    acc += wj * ext[(i + j) * cd + c];
                }
                *o = silu(acc);
            }
        }
        state.copy_from_slice(&ext[t * cd..]);
    }

    /// The gated delta rule over `t` tokens of convolved `qkv` (`[t, conv_dim]`), writing the
    /// per-head outputs to `out` (`[t, n_v_heads * v_dim]`) and updating `state`
    /// (`[n_v_heads, k_dim, v_dim]`).
    fn delta_rule(
        &self,
        qkv: &[f32],
        g: &[f32],
        beta: &[f32],
        t: usize,
        state: &mut [f32],
        out: &mut [f32],
    ) {
        let s = self.shape;
        let (dk, dv, nv) = (s.k_dim, s.v_dim, s.n_v_heads);
        let cd = s.conv_dim();
        let (kt, vt) = (s.key_total(), s.value_total());
        let scale = 1.0 / (dk as f32).sqrt();
        // Per value head: q, k (normalised, q scaled), v, g, beta as contiguous [t, ...] rows.
        let mut heads: Vec<(&mut [f32], Vec<f32>)> = state
            .chunks_exact_mut(dk * dv)
            .map(|st| (st, vec![0f32; t * dv]))
            .collect();
        oxinfer_kernels::pool::for_each_mut(&mut heads, |vh, (st, o)| {
            let kh = s.k_head_of(vh);
            let mut q = vec![0f32; t * dk];
            let mut k = vec![0f32; t * dk];
            let mut v = vec![0f32; t * dv];
            let mut gh = vec![0f32; t];
            let mut bh = vec![0f32; t];
            for i in 0..t {
                let row = &qkv[i * cd..(i + 1) * cd];
                let qi = &mut q[i * dk..(i + 1) * dk];
                qi.copy_from_slice(&row[kh * dk..(kh + 1) * dk]);
                l2norm(qi);
                qi.iter_mut().for_each(|x| *x *= scale);
                let ki = &mut k[i * dk..(i + 1) * dk];
                ki.copy_from_slice(&row[kt + kh * dk..kt + (kh + 1) * dk]);
                l2norm(ki);
                v[i * dv..(i + 1) * dv]
                    .copy_from_slice(&row[2 * kt + vh * dv..2 * kt + (vh + 1) * dv]);
                gh[i] = g[i * nv + vh];
                bh[i] = beta[i * nv + vh];
            }
            if t == 1 {
                recurrent(&q, &k, &v, &gh, &bh, dk, dv, st, o);
            } else {
                for c0 in (0..t).step_by(CHUNK) {
                    let c1 = (c0 + CHUNK).min(t);
                    chunked(
                        &q[c0 * dk..c1 * dk],
                        &k[c0 * dk..c1 * dk],
                        &v[c0 * dv..c1 * dv],
                        &gh[c0..c1],
                        &bh[c0..c1],
                        dk,
                        dv,
                        st,
                        &mut o[c0 * dv..c1 * dv],
                    );
                }
            }
        });
        for (vh, (_, o)) in heads.iter().enumerate() {
            for i in 0..t {
                out[i * vt + vh * dv..i * vt + (vh + 1) * dv]
                    .copy_from_slice(&o[i * dv..(i + 1) * dv]);
            }
        }
    }
}

/// One token at a time: `S ← exp(g)·S; S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq`.
#[allow(clippy::too_many_arguments)]
pub fn recurrent(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    dk: usize,
    dv: usize,
    st: &mut [f32],
    out: &mut [f32],
) {
    let mut kv = vec![0f32; dv];
    for i in 0..g.len() {
        let (qi, ki, vi) = (
            &q[i * dk..(i + 1) * dk],
            &k[i * dk..(i + 1) * dk],
            &v[i * dv..(i + 1) * dv],
        );
        let decay = g[i].exp();
        st.iter_mut().for_each(|x| *x *= decay);
        kv.fill(0.0);
        for (a, srow) in st.chunks_exact(dv).enumerate() {
            for (m, &sv) in kv.iter_mut().zip(srow) {
                *m += sv * ki[a];
            }
        }
        for (m, &vv) in kv.iter_mut().zip(vi) {
            *m = (vv - *m) * beta[i];
        }
        for (a, srow) in st.chunks_exact_mut(dv).enumerate() {
            for (sv, &d) in srow.iter_mut().zip(&kv) {
                *sv += ki[a] * d;
            }
        }
        let oi = &mut out[i * dv..(i + 1) * dv];
        oi.fill(0.0);
        for (a, srow) in st.chunks_exact(dv).enumerate() {
            for (o, &sv) in oi.iter_mut().zip(srow) {
                *o += sv * qi[a];
            }
        }
    }
}

/// One chunk of `c` tokens in the parallel (WY / UT-transform) form, continuing from `st`.
#[allow(clippy::too_many_arguments)]
pub fn chunked(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    dk: usize,
    dv: usize,
    st: &mut [f32],
    out: &mut [f32],
) {
    let c = g.len();
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let mut cum = vec![0f32; c];
    let mut acc = 0f32;
    for i in 0..c {
        acc += g[i];
        cum[i] = acc;
    }
    let krow = |i: usize| &k[i * dk..(i + 1) * dk];
    // Strictly lower A[i][j] = β_i k_i·k_j · exp(cum_i − cum_j); solve (I + A) X = B by forward
    // substitution for B = β v (→ u) and B = β k exp(cum) (→ w).
    let mut a = vec![0f32; c * c];
    for i in 0..c {
        for j in 0..i {
            a[i * c + j] = beta[i] * dot(krow(i), krow(j)) * (cum[i] - cum[j]).exp();
        }
    }
    let mut u = vec![0f32; c * dv];
    let mut w = vec![0f32; c * dk];
    for i in 0..c {
        for x in 0..dv {
            u[i * dv + x] = beta[i] * v[i * dv + x];
        }
        let e = cum[i].exp();
        for x in 0..dk {
            w[i * dk + x] = beta[i] * k[i * dk + x] * e;
        }
        for j in 0..i {
            let aij = a[i * c + j];
            if aij != 0.0 {
                for x in 0..dv {
                    u[i * dv + x] -= aij * u[j * dv + x];
                }
                for x in 0..dk {
                    w[i * dk + x] -= aij * w[j * dk + x];
                }
            }
        }
    }
    // v_new = u − w S.
    let mut vn = u;
    for i in 0..c {
        let wi = &w[i * dk..(i + 1) * dk];
        let vi = &mut vn[i * dv..(i + 1) * dv];
        for (aa, srow) in st.chunks_exact(dv).enumerate() {
            let f = wi[aa];
            for (o, &sv) in vi.iter_mut().zip(srow) {
                *o -= f * sv;
            }
        }
    }
    // out_i = (q_i exp(cum_i)) S + Σ_{j≤i} (q_i·k_j) exp(cum_i − cum_j) v_new_j.
    for i in 0..c {
        let qi = &q[i * dk..(i + 1) * dk];
        let oi = &mut out[i * dv..(i + 1) * dv];
        oi.fill(0.0);
        let e = cum[i].exp();
        for (aa, srow) in st.chunks_exact(dv).enumerate() {
            let f = qi[aa] * e;
            for (o, &sv) in oi.iter_mut().zip(srow) {
                *o += f * sv;
            }
        }
        for j in 0..=i {
            let f = dot(qi, krow(j)) * (cum[i] - cum[j]).exp();
            for (o, &x) in oi.iter_mut().zip(&vn[j * dv..(j + 1) * dv]) {
                *o += f * x;
            }
        }
    }
    // S ← S exp(cum_last) + Σ_j (k_j exp(cum_last − cum_j)) ⊗ v_new_j.
    let last = cum[c - 1];
    let decay = last.exp();
    st.iter_mut().for_each(|x| *x *= decay);
    for j in 0..c {
        let e = (last - cum[j]).exp();
        let kj = krow(j);
        let vj = &vn[j * dv..(j + 1) * dv];
        for (aa, srow) in st.chunks_exact_mut(dv).enumerate() {
            let f = kj[aa] * e;
            for (sv, &x) in srow.iter_mut().zip(vj) {
                *sv += f * x;
            }
        }
    }
}

fn l2norm(x: &mut [f32]) {
    let ss: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (ss + 1e-6).sqrt();
    x.iter_mut().for_each(|v| *v *= inv);
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `log(1 + exp(x))`, linear above 20 like torch.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        x.exp().ln_1p()
    }
}

impl RecurrentOp for GatedDeltaNet {
    fn forward(&self, h: &[f32], t: usize, layer: usize, seqs: &mut [SeqRows<'_>]) -> Vec<f32> {
        GatedDeltaNet::forward(self, h, t, layer, seqs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    }

    /// The chunked form over uneven chunks equals the recurrent form token by token.
    #[test]
    fn chunked_equals_recurrent() {
        let (t, dk, dv) = (150, 8, 6);
        let mut seed = 7u64;
        let mut gen = |n: usize| (0..n).map(|_| lcg(&mut seed)).collect::<Vec<f32>>();
        let mut q = gen(t * dk);
        let mut k = gen(t * dk);
        for r in q.chunks_exact_mut(dk).chain(k.chunks_exact_mut(dk)) {
            l2norm(r);
        }
        let v = gen(t * dv);
        let g: Vec<f32> = gen(t).iter().map(|x| -(x + 0.5) * 0.6).collect();
        let beta: Vec<f32> = gen(t).iter().map(|x| sigmoid(4.0 * x)).collect();
        let mut s1 = gen(dk * dv);
        let mut s2 = s1.clone();
        let mut o1 = vec![0f32; t * dv];
        let mut o2 = vec![0f32; t * dv];
        recurrent(&q, &k, &v, &g, &beta, dk, dv, &mut s1, &mut o1);
        let mut c0 = 0;
        for c in [1usize, 64, 37, 48] {
            let c1 = c0 + c;
            chunked(
                &q[c0 * dk..c1 * dk],
                &k[c0 * dk..c1 * dk],
                &v[c0 * dv..c1 * dv],
                &g[c0..c1],
                &beta[c0..c1],
                dk,
                dv,
                &mut s2,
                &mut o2[c0 * dv..c1 * dv],
            );
            c0 = c1;
        }
        assert_eq!(c0, t);
        let d = o1
            .iter()
            .zip(&o2)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        let ds = s1
            .iter()
            .zip(&s2)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            d < 1e-4 && ds < 1e-4,
            "outputs differ by {d}, states by {ds}"
        );
    }
}
