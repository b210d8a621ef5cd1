//! `OXINFER_GPU_CHECK=1`: a [`Backend`] wrapper that lets the device compute each op, recomputes
//! it with the CPU twin, and keeps the worst relative error per op kind for [`report`].
//!
//! A whole [`Plan`] run is compared with the CPU executor ([`crate::plan::cpu`]) on copies of
//! the caches: the logits and every layer's stored keys and values; a whole encoder run with
//! [`encoder::run_cpu`]: the last hidden states.
//!
//! Relative error of one op = `max |device − cpu| / max |cpu|` over its whole output (a norm-wise
//! measure: element-wise ratios explode on outputs near zero). The CPU twin is the path the
//! program would have taken without the backend (the dispatching CPU matmul, the reference
//! attention, [`super::cpu_ref::conv::conv2d_cpu`]), so the number says how far the device moves
//! results from the CPU build.

use super::{AttentionGeom, Backend, ConvGeom, DeviceWeight, GateAct, Job, NormSpec, Weight};
use crate::plan::batch::gather_rows;
use crate::plan::encoder::{self, EncoderPlan};
use crate::plan::{cpu, KvCache, Plan, PlanInput, SeqRows};
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

/// A host copy of `s`'s cache holding what the backend stored in the pass that just ran:
/// appended to the host (already in the copy) or kept in the device mirror (read back and
/// appended here); not advanced, like the CPU twin's copies.
fn device_view(s: &SeqRows<'_>) -> KvCache {
    let mut c = s.cache.clone();
    let from = s.cache.len();
    if let Some(d) = s.cache.device().filter(|d| d.len() > from) {
        for layer in 0..c.layers.len() {
            match d.read(layer, from, d.len()) {
                Ok((k, v)) => c.append(layer, &k, &v),
                Err(e) => eprintln!("OXINFER_GPU_CHECK: reading the device KV cache failed: {e}"),
            }
        }
    }
    c
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
        match super::cpu_ref::conv::conv2d_cpu(x, g, norm, &job.w, &mut cpu) {
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
        let cpu = super::cpu_ref::attention::attention_cpu(q, k, v, g);
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

    fn run_plan(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        logits: &mut [f32],
    ) -> bool {
        // The twin runs on host copies: rows only a device mirror holds come down first.
        let synced =
            |seqs: &mut [SeqRows<'_>]| seqs.iter_mut().try_for_each(|s| s.cache.sync_host());
        if let Err(e) = synced(seqs) {
            eprintln!("OXINFER_GPU_CHECK: reading the device KV cache failed: {e}");
            return false;
        }
        let mut copies: Vec<KvCache> = seqs.iter().map(|s| s.cache.clone()).collect();
        if !self.inner.run_plan(plan, input, seqs, logits) {
            return false;
        }
        let dev_kv: Vec<KvCache> = seqs.iter().map(device_view).collect();
        let mut twin: Vec<SeqRows> = seqs
            .iter()
            .zip(copies.iter_mut())
            .map(|(s, cache)| SeqRows {
                row: s.row,
                len: s.len,
                all_logits: s.all_logits,
                cache,
                media: s.media.clone(),
            })
            .collect();
        let _cpu = super::cpu_only();
        let h = match cpu::hidden(plan, input.ids, input.x.to_vec(), &mut twin) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("OXINFER_GPU_CHECK: the CPU twin of a plan run failed: {e}");
                return true;
            }
        };
        drop(twin);
        let rows = gather_rows(&h, plan.dim, input.logit_rows);
        let cpu_logits = cpu::logits(plan, &rows, input.logit_rows.len());
        let n = plan.layers.len();
        for li in 0..n {
            for (d, c) in dev_kv.iter().zip(&copies) {
                let (dev, cpu) = (&d.layers[li], &c.layers[li]);
                let (dk, ck) = (dev.k.to_f32(), cpu.k.to_f32());
                record("plan keys (per layer)".to_string(), &dk, &ck);
                record(
                    "plan values (per layer)".to_string(),
                    &dev.v.to_f32(),
                    &cpu.v.to_f32(),
                );
                if li == 0 || li + 1 == n {
                    record(format!("plan keys layer {li}"), &dk, &ck);
                }
            }
        }
        record("plan logits".to_string(), logits, &cpu_logits);
        true
    }

    fn run_encoder(&self, plan: &EncoderPlan, x: &[f32], lens: &[usize], out: &mut [f32]) -> bool {
        if !self.inner.run_encoder(plan, x, lens, out) {
            return false;
        }
        let _cpu = super::cpu_only();
        let cpu = encoder::run_cpu(plan, x.to_vec(), lens);
        record("encoder hidden states".to_string(), out, &cpu);
        true
    }

    fn stats(&self) -> Option<String> {
        self.inner.stats()
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
            crate::backend::cpu_ref::conv::conv2d_cpu(x, g, norm, &job.w, job.y).unwrap();
            job.y.iter_mut().for_each(|v| *v += self.bias);
            true
        }
    }

    #[test]
    fn conv2d_is_recomputed_and_recorded() {
        let g = crate::backend::cpu_ref::conv::conv_geom(5, 4, 8, 3, 2).unwrap();
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
        crate::backend::cpu_ref::conv::conv2d_cpu(&x, &g, Some(&norm), &w, &mut want).unwrap();
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
