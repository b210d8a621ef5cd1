//! `OXINFER_GPU_CHECK=1`: a [`Backend`] wrapper that lets the device compute each op, recomputes
//! it with the CPU twin, and keeps the worst relative error per op kind for [`report`].
//!
//! Relative error of one op = `max |device − cpu| / max |cpu|` over its whole output (a norm-wise
//! measure: element-wise ratios explode on outputs near zero). The CPU twin is the path the
//! program would have taken without the backend (the dispatching CPU matmul, the reference
//! attention, [`crate::nn::conv::conv2d_cpu`]), so the number says how far the device moves
//! results from the CPU build.

use super::stack::{stack_cpu, KvStore, Past, StackDesc, StackInput, StackOutput};
use super::{AttentionGeom, Backend, ConvGeom, DeviceWeight, GateAct, Job, NormSpec, Weight};
use oxinfer_kernels::WeightMatrix;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Per op kind: (calls, worst relative error, element count of the worst call).
static WORST: Mutex<BTreeMap<String, (u64, f64, usize)>> = Mutex::new(BTreeMap::new());

fn record(kind: String, dev: &[f32], cpu: &[f32]) {
    let mut max_ref = 0f64;
    let mut max_diff = 0f64;
    let mut bad = false;
    for (&d, &c) in dev.iter().zip(cpu) {
        if !d.is_finite() && c.is_finite() {
            bad = true;
        }
        max_ref = max_ref.max(c.abs() as f64);
        max_diff = max_diff.max((d as f64 - c as f64).abs());
    }
    let rel = if bad {
        f64::INFINITY
    } else if max_ref > 0.0 {
        max_diff / max_ref
    } else {
        max_diff
    };
    let mut w = WORST.lock().unwrap_or_else(|e| e.into_inner());
    let e = w.entry(kind).or_insert((0, 0.0, 0));
    e.0 += 1;
    if rel > e.1 || e.0 == 1 {
        e.1 = rel;
        e.2 = dev.len();
    }
}

/// The summary table, or `None` when no device op ran.
pub fn report() -> Option<String> {
    let w = WORST.lock().unwrap_or_else(|e| e.into_inner());
    if w.is_empty() {
        return None;
    }
    let mut s = String::from(
        "OXINFER_GPU_CHECK: worst relative error (max|dev-cpu| / max|cpu|) per op kind\n",
    );
    for (kind, (calls, rel, n)) in w.iter() {
        s.push_str(&format!(
            "  {kind:<24} {rel:.3e}  ({calls} calls; worst over {n} values)\n"
        ));
    }
    Some(s)
}

/// Wraps a backend; every op it handles is recomputed on the CPU and compared.
pub struct Checked {
    inner: Box<dyn Backend>,
    name: String,
}

impl Checked {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Backend>) -> Self {
        let name = format!("{} (checked)", inner.name());
        Checked { inner, name }
    }
}

impl Backend for Checked {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants(&self, n_out: usize, n_in: usize, t: usize) -> bool {
        self.inner.wants(n_out, n_in, t)
    }

    fn upload(&self, w: &WeightMatrix) -> Option<DeviceWeight> {
        self.inner.upload(w)
    }

    fn matmul(&self, x: &[f32], t: usize, n_in: usize, jobs: &mut [Job]) -> bool {
        if !self.inner.matmul(x, t, n_in, jobs) {
            return false;
        }
        for j in jobs.iter() {
            let mut cpu = vec![0f32; j.y.len()];
            oxinfer_kernels::matmul(&j.w, x, t, &mut cpu);
            record(format!("matmul {}", j.w.format), j.y, &cpu);
        }
        true
    }

    fn conv2d(&self, x: &[f32], g: &ConvGeom, norm: Option<&NormSpec>, job: &mut Job) -> bool {
        if !self.inner.conv2d(x, g, norm, job) {
            return false;
        }
        let mut cpu = vec![0f32; job.y.len()];
        match crate::nn::conv::conv2d_cpu(x, g, norm, &job.w, &mut cpu) {
            Ok(()) => record("conv2d".to_string(), job.y, &cpu),
            // Shapes the CPU twin rejects: the device result cannot be trusted either (a
            // non-finite device value against a finite one records an infinite error).
            Err(e) => {
                eprintln!("OXINFER_GPU_CHECK: {e}");
                record("conv2d".to_string(), &[f32::NAN], &[0.0]);
            }
        }
        true
    }

    fn attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        g: &AttentionGeom,
        out: &mut [f32],
    ) -> bool {
        if !self.inner.attention(q, k, v, g, out) {
            return false;
        }
        let cpu = crate::nn::attention::attention_cpu(q, k, v, g);
        record("attention".to_string(), out, &cpu);
        true
    }

    fn gated_mlp(
        &self,
        x: &[f32],
        t: usize,
        gate: Weight,
        up: Weight,
        down: Weight,
        act: GateAct,
        y: &mut [f32],
    ) -> bool {
        if !self.inner.gated_mlp(x, t, gate, up, down, act, y) {
            return false;
        }
        let ffn = gate.w.rows;
        let mut g = vec![0f32; t * ffn];
        let mut u = vec![0f32; t * ffn];
        oxinfer_kernels::matmul(&gate.w, x, t, &mut g);
        oxinfer_kernels::matmul(&up.w, x, t, &mut u);
        for (g, u) in g.iter_mut().zip(&u) {
            *g = act.apply(*g) * u;
        }
        let mut cpu = vec![0f32; y.len()];
        oxinfer_kernels::matmul(&down.w, &g, t, &mut cpu);
        record(
            format!("gated_mlp {}/{}", gate.w.format, down.w.format),
            y,
            &cpu,
        );
        true
    }

    fn decoder_stack(&self, d: &StackDesc, i: &StackInput, out: &mut StackOutput) -> bool {
        // Both sides read the real cache's past rows and collect their new rows; the device's
        // go to the real cache once compared (the CPU twin still needs the old past).
        let mut dev = Collect {
            inner: &*out.kv,
            k: Vec::new(),
            v: Vec::new(),
        };
        let mut dev_out = StackOutput {
            logits: std::mem::take(&mut out.logits),
            kv: &mut dev,
        };
        let done = self.inner.decoder_stack(d, i, &mut dev_out);
        let logits = std::mem::take(&mut dev_out.logits);
        let (dk, dv) = (std::mem::take(&mut dev.k), std::mem::take(&mut dev.v));
        if !done {
            out.logits = logits;
            return false;
        }
        let mut cpu = Collect {
            inner: &*out.kv,
            k: Vec::new(),
            v: Vec::new(),
        };
        let mut cpu_out = StackOutput {
            logits: Vec::new(),
            kv: &mut cpu,
        };
        stack_cpu(d, i, &mut cpu_out);
        let cpu_logits = std::mem::take(&mut cpu_out.logits);
        let n = cpu.k.len();
        for li in 0..n {
            record("stack keys (per layer)".to_string(), &dk[li], &cpu.k[li]);
            record("stack values (per layer)".to_string(), &dv[li], &cpu.v[li]);
            if li == 0 || li + 1 == n {
                record(format!("stack keys layer {li}"), &dk[li], &cpu.k[li]);
            }
        }
        record("stack logits".to_string(), &logits, &cpu_logits);
        for (li, (k, v)) in dk.iter().zip(&dv).enumerate() {
            out.kv.append(li, k, v);
        }
        out.logits = logits;
        true
    }

    fn stats(&self) -> Option<String> {
        self.inner.stats()
    }
}

/// Reads past rows from another store and collects the new ones.
struct Collect<'a> {
    inner: &'a dyn KvStore,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvStore for Collect<'_> {
    fn past(&self, seq: usize, layer: usize) -> Past<'_> {
        self.inner.past(seq, layer)
    }

    fn append(&mut self, _layer: usize, k: &[f32], v: &[f32]) {
        self.k.push(k.to_vec());
        self.v.push(v.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::NormKind;
    use oxinfer_kernels::WeightFormat;

    /// A "device" that computes convolutions with the CPU reference and adds `bias` to every
    /// output value.
    struct Skewed {
        bias: f32,
    }

    impl Backend for Skewed {
        fn name(&self) -> &str {
            "skewed"
        }
        fn wants(&self, _: usize, _: usize, _: usize) -> bool {
            true
        }
        fn upload(&self, _: &WeightMatrix) -> Option<DeviceWeight> {
            Some(Box::new(()))
        }
        fn matmul(&self, _: &[f32], _: usize, _: usize, _: &mut [Job]) -> bool {
            false
        }
        fn conv2d(&self, x: &[f32], g: &ConvGeom, norm: Option<&NormSpec>, job: &mut Job) -> bool {
            crate::nn::conv::conv2d_cpu(x, g, norm, &job.w, job.y).unwrap();
            job.y.iter_mut().for_each(|v| *v += self.bias);
            true
        }
    }

    #[test]
    fn conv2d_is_recomputed_and_recorded() {
        let g = crate::nn::conv::conv_geom(5, 4, 8, 3, 2).unwrap();
        let x: Vec<f32> = (0..5 * 4 * 8).map(|i| (i % 7) as f32 - 3.0).collect();
        let wv: Vec<f32> = (0..6 * 72).map(|i| ((i % 5) as f32 - 2.0) * 0.1).collect();
        let bytes: Vec<u8> = wv.iter().flat_map(|v| v.to_le_bytes()).collect();
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, 6, 72).unwrap();
        let (gamma, beta) = (vec![1f32; 8], vec![0f32; 8]);
        let norm = NormSpec {
            kind: NormKind::Group(2),
            eps: 1e-5,
            gamma: &gamma,
            beta: &beta,
            silu: true,
        };
        let mut want = vec![0f32; g.oh * g.ow * 6];
        crate::nn::conv::conv2d_cpu(&x, &g, Some(&norm), &w, &mut want).unwrap();
        let checked = Checked::new(Box::new(Skewed { bias: 1e3 }));
        let dev = checked.upload(&w).unwrap();
        let mut y = vec![0f32; want.len()];
        let mut job = Job {
            w,
            dev: &dev,
            y: &mut y,
        };
        assert!(checked.conv2d(&x, &g, Some(&norm), &mut job));
        // The device's result is kept; the error it made is in the report.
        assert_eq!(y[0], want[0] + 1e3);
        let r = report().unwrap();
        let line = r.lines().find(|l| l.contains("conv2d")).unwrap();
        let worst: f64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(worst > 1.0, "{line}");
    }
}
