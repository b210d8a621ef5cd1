//! [`WgpuBackend`]: the [`Backend`] implementation over one wgpu adapter.

use crate::gpu::Gpu;
use crate::kernels::Dispatch;
use crate::kernels::{self, MAX_HEAD_DIM};
use crate::matrix::{linear, DeviceMatrix, LinearIo};
use crate::stack_run::{Layout, Scratch};
use oxinfer::backend::{AttentionGeom, Backend, DeviceWeight, GateAct, Job, Weight};
use oxinfer::plan::encoder::EncoderPlan;
use oxinfer::plan::{Plan, PlanInput, SeqRows};
use oxinfer_kernels::WeightMatrix;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Per op kind: calls, seconds (host wall time, transfers included), bytes up, bytes down.
type Stats = BTreeMap<String, (u64, f64, u64, u64)>;

/// One wgpu adapter as an oxinfer backend. Ops run one submission at a time (a mutex guards
/// the scratch buffers); the device KV caches it attaches share the device.
pub struct WgpuBackend {
    name: String,
    pub(crate) gpu: Arc<Gpu>,
    scratch: Mutex<Scratch>,
    stats: Mutex<Stats>,
    min_tokens: usize,
    warned: AtomicBool,
    /// The reasons for declined whole passes said so far (each once).
    declines: Mutex<Vec<&'static str>>,
}

impl WgpuBackend {
    /// Opens adapter `index` (the order of [`crate::probe`]), taking single device ops from
    /// `OXINFER_WGPU_MIN_TOKENS` rows on (default 16; whole plans run at any size).
    pub fn new(index: usize) -> Result<Self, String> {
        let min_tokens = std::env::var("OXINFER_WGPU_MIN_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        Self::with_min_tokens(index, min_tokens)
    }

    /// Opens adapter `index`, taking single ops of at least `min_tokens` rows.
    pub fn with_min_tokens(index: usize, min_tokens: usize) -> Result<Self, String> {
        let gpu = Gpu::open(index)?;
        Ok(WgpuBackend {
            name: format!("wgpu:{index}"),
            gpu: Arc::new(gpu),
            scratch: Mutex::new(Scratch::default()),
            stats: Mutex::new(BTreeMap::new()),
            min_tokens,
            warned: AtomicBool::new(false),
            declines: Mutex::new(Vec::new()),
        })
    }

    /// This backend with storage bindings of at most `bytes` (below the device's own limit), so
    /// that weights larger than that are uploaded in row parts: for tests of the split matrices
    /// on devices whose limit is larger. Call it before any upload.
    pub fn with_max_binding(mut self, bytes: u64) -> Self {
        if let Some(g) = Arc::get_mut(&mut self.gpu) {
            let l = &mut g.limits;
            l.max_storage_buffer_binding_size = l.max_storage_buffer_binding_size.min(bytes);
        }
        self
    }

    /// This backend without subgroup operations (the kernels' workgroup-memory fallbacks), for
    /// tests of those on adapters that have subgroups. Call it before any kernel runs.
    pub fn without_subgroups(mut self) -> Self {
        if let Some(g) = Arc::get_mut(&mut self.gpu) {
            g.subgroups = false;
        }
        self
    }

    /// Whether kernels use subgroup operations on this adapter.
    pub fn subgroups(&self) -> bool {
        self.gpu.subgroups
    }

    /// The adapter's name and API (`"llvmpipe (LLVM 15.0.6, 256 bits) on Vulkan"`).
    pub fn adapter(&self) -> String {
        format!("{} on {:?}", self.gpu.info.name, self.gpu.info.backend)
    }

    pub(crate) fn scratch(&self) -> std::sync::MutexGuard<'_, Scratch> {
        self.scratch.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, kind: &str, start: Instant, up: usize, down: usize) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.entry(kind.to_string()).or_insert((0, 0.0, 0, 0));
        e.0 += 1;
        e.1 += start.elapsed().as_secs_f64();
        e.2 += up as u64;
        e.3 += down as u64;
    }

    /// Reports a device failure once (the op then runs on the CPU).
    fn fail(&self, what: &str, e: String) -> bool {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("[{}: {what} failed: {e}; running it on the CPU]", self.name);
        }
        false
    }

    /// Says once per reason that a whole `what` pass was declined (the CPU runs it).
    fn declined(&self, what: &str, why: &'static str) {
        let mut said = self.declines.lock().unwrap_or_else(|e| e.into_inner());
        if !said.contains(&why) {
            said.push(why);
            eprintln!(
                "[{}: {what} declined ({why}); running it on the CPU]",
                self.name
            );
        }
    }

    /// Runs `f`'s dispatches over an arena laid out by `f` after `x` is uploaded to its start,
    /// and reads `out.len()` values back from the offset `f` returns.
    fn one_shot(
        &self,
        x: &[f32],
        extra: usize,
        out: &mut [f32],
        f: impl FnOnce(&wgpu::Buffer, &mut Layout) -> (Vec<Dispatch>, usize),
    ) -> Result<(), String> {
        let mut lay = Layout::default();
        let xa = lay.take(x.len());
        debug_assert_eq!(xa, 0);
        let mut sc = self.scratch();
        let a = sc.arena(&self.gpu, x.len() + extra + 64 * 16);
        self.gpu.write(&a, 0, x);
        let (d, at) = f(&a, &mut lay);
        if lay.0 > x.len() + extra + 64 * 16 {
            return Err("arena layout exceeded its reservation".into());
        }
        self.gpu.run(&d, &mut [(&a, at, out)])
    }

    fn mat<'a>(w: &Weight<'a>) -> Option<&'a DeviceMatrix> {
        w.dev.downcast_ref::<DeviceMatrix>()
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants(&self, _n_out: usize, _n_in: usize, t: usize) -> bool {
        t >= self.min_tokens
    }

    fn upload(&self, w: &WeightMatrix) -> Option<DeviceWeight> {
        let start = Instant::now();
        let m = DeviceMatrix::upload(&self.gpu, w)?;
        if let Err(e) = self.gpu.check() {
            self.fail("upload", e);
            return None;
        }
        self.note("upload", start, w.data.len() + w.scales.len(), 0);
        Some(Box::new(m))
    }

    fn matmul(&self, x: &[f32], t: usize, n_in: usize, jobs: &mut [Job]) -> bool {
        if x.len() != t * n_in {
            return false;
        }
        let start = Instant::now();
        for j in jobs.iter_mut() {
            let Some(m) = j.dev.downcast_ref::<DeviceMatrix>() else {
                return false;
            };
            if m.cols != n_in || j.y.len() != t * m.rows {
                return false;
            }
            let r = self.one_shot(x, t * n_in + t * m.rows + 64, j.y, |a, lay| {
                let (xq, y) = (lay.take(t * n_in), lay.take(t * m.rows));
                let mut d = Vec::new();
                let io = LinearIo {
                    a,
                    x: 0,
                    xq,
                    out: a,
                    y,
                    ld: m.rows,
                };
                linear(m, &io, t, &mut None, &mut d);
                (d, y)
            });
            if let Err(e) = r {
                return self.fail("matmul", e);
            }
        }
        let down = jobs.iter().map(|j| j.y.len() * 4).sum();
        self.note("matmul", start, std::mem::size_of_val(x), down);
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
        let s = &g.shape;
        let kv_len = g.n_keys() * s.n_kv_heads * s.head_dim;
        let ok = g.t >= self.min_tokens
            && s.head_dim <= MAX_HEAD_DIM
            && s.n_kv_heads > 0
            && s.n_heads.is_multiple_of(s.n_kv_heads)
            && q.len() == g.t * s.n_heads * s.head_dim
            && out.len() == q.len()
            && k.len() >= kv_len
            && v.len() >= kv_len;
        if !ok {
            return false;
        }
        let start = Instant::now();
        let kv = self.gpu.buffer("attention kv", (2 * kv_len * 4) as u64);
        self.gpu.write(&kv, 0, &k[..kv_len]);
        self.gpu.write(&kv, kv_len, &v[..kv_len]);
        let r = self.one_shot(q, q.len() + 64, out, |a, lay| {
            let o = lay.take(q.len());
            (vec![kernels::attention(a, &kv, 0, o, 0, kv_len, g)], o)
        });
        if let Err(e) = r {
            return self.fail("attention", e);
        }
        self.note(
            "attention",
            start,
            (q.len() + 2 * kv_len) * 4,
            out.len() * 4,
        );
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
        let (Some(gm), Some(um), Some(dm)) = (Self::mat(&gate), Self::mat(&up), Self::mat(&down))
        else {
            return false;
        };
        let ffn = gm.rows;
        let ok = um.rows == ffn
            && gm.cols == um.cols
            && dm.cols == ffn
            && x.len() == t * gm.cols
            && y.len() == t * dm.rows;
        if !ok {
            return false;
        }
        let start = Instant::now();
        let widest = gm.cols.max(ffn);
        let extra = t * (widest + 2 * ffn + dm.rows) + 4 * 64;
        let r = self.one_shot(x, extra, y, |a, lay| {
            let (xq, g, u, out) = (
                lay.take(t * widest),
                lay.take(t * ffn),
                lay.take(t * ffn),
                lay.take(t * dm.rows),
            );
            let io = |x, y, ld| LinearIo {
                a,
                x,
                xq,
                out: a,
                y,
                ld,
            };
            let (mut d, mut ready) = (Vec::new(), None);
            linear(gm, &io(0, g, ffn), t, &mut ready, &mut d);
            linear(um, &io(0, u, ffn), t, &mut ready, &mut d);
            d.push(kernels::gated_act(a, g, u, t * ffn, act));
            linear(dm, &io(g, out, dm.rows), t, &mut None, &mut d);
            (d, out)
        });
        if let Err(e) = r {
            return self.fail("gated_mlp", e);
        }
        self.note("gated_mlp", start, x.len() * 4, y.len() * 4);
        true
    }

    fn run_plan(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        logits: &mut [f32],
    ) -> bool {
        let t = input.t();
        if t == 0 || input.x.len() != t * plan.dim {
            return false;
        }
        let Some(s) = crate::stack::lower(self, plan) else {
            return false;
        };
        let start = Instant::now();
        let r = crate::stack_run::run(&self.gpu, &mut self.scratch(), &s, input, seqs, logits);
        match r {
            Ok(done) => {
                let kind = if t <= seqs.len() {
                    "run_plan decode"
                } else {
                    "run_plan"
                };
                self.note(kind, start, input.x.len() * 4, 4 * logits.len());
                done
            }
            Err(e) => self.fail("run_plan", e),
        }
    }

    fn run_encoder(&self, plan: &EncoderPlan, x: &[f32], lens: &[usize], out: &mut [f32]) -> bool {
        let start = Instant::now();
        let r = crate::encoder::run(&self.gpu, &mut self.scratch(), plan, x, lens, out);
        match r {
            Ok(None) => {
                self.note("run_encoder", start, x.len() * 4, out.len() * 4);
                true
            }
            Ok(Some(why)) => {
                self.declined("encoder", why);
                false
            }
            Err(e) => self.fail("run_encoder", e),
        }
    }

    fn stats(&self) -> Option<String> {
        let s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_empty() {
            return None;
        }
        let mut out = format!(
            "{} ({}) device ops (wall time incl. transfers):\n",
            self.name,
            self.adapter()
        );
        for (k, (calls, secs, up, down)) in s.iter() {
            out.push_str(&format!(
                "  {k:<16} {calls:>7} calls {:>10.2} ms  up {:>9.1} MB  down {:>9.1} MB\n",
                secs * 1e3,
                *up as f64 / 1e6,
                *down as f64 / 1e6
            ));
        }
        if let Some(p) = self.gpu.profile_report() {
            out.push_str(&p);
        }
        Some(out)
    }
}
