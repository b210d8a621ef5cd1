//! [`CudaBackend`]: the [`Backend`] implementation over one GPU.

use crate::conv::ConvPath;
use crate::gemm::{self, QuantPath};
use crate::gemv::{self, GemvOut};
use crate::gpu::{self, DevBuf, Gpu, Slot};
use crate::kv::KvLayout;
use crate::matrix::DeviceMatrix;
use crate::ops;
use crate::stack_run::Out;
use oxinfer::backend::{
    AttentionGeom, Backend, ConvGeom, DeviceWeight, GateAct, Job, NormSpec, Weight,
};
use oxinfer::plan::encoder::EncoderPlan;
use oxinfer::plan::{KvTypes, Plan, PlanInput, RowScore, SeqRows};
use oxinfer_kernels::{WeightFormat, WeightMatrix};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Per op kind: calls, seconds (host wall time, transfers included), bytes up, bytes down.
type Stats = BTreeMap<String, (u64, f64, u64, u64)>;

/// One CUDA GPU as an oxinfer backend. Ops run one at a time on one stream (a mutex guards the
/// device state, shared with the device KV caches this backend attaches to sequences); the
/// model code calls from one thread at a time anyway.
pub struct CudaBackend {
    name: String,
    gpu: Arc<Mutex<Gpu>>,
    stats: Mutex<Stats>,
    path: QuantPath,
    conv_path: ConvPath,
    min_tokens: usize,
    warned: AtomicBool,
}

impl CudaBackend {
    /// Opens GPU `ordinal` with the defaults: quantized path from `OXINFER_CUDA_QGEMM`,
    /// convolution path from `OXINFER_CUDA_CONV`, single device ops from
    /// `OXINFER_CUDA_MIN_TOKENS` rows on (default 16; whole plans run at any size).
    pub fn new(ordinal: usize) -> Result<Self, String> {
        let min_tokens = std::env::var("OXINFER_CUDA_MIN_TOKENS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16);
        Self::with_options(ordinal, QuantPath::from_env(), min_tokens)
    }

    /// Opens GPU `ordinal`, multiplying quantized weights by `path` and taking single ops of
    /// at least `min_tokens` rows (whole plans at any size).
    pub fn with_options(
        ordinal: usize,
        path: QuantPath,
        min_tokens: usize,
    ) -> Result<Self, String> {
        if !gpu::driver_present() {
            return Err("the CUDA driver library (libcuda) was not found".to_string());
        }
        let gpu = Gpu::open(ordinal)?;
        Ok(CudaBackend {
            name: format!("cuda:{ordinal}"),
            gpu: Arc::new(Mutex::new(gpu)),
            stats: Mutex::new(BTreeMap::new()),
            path,
            conv_path: ConvPath::from_env(),
            min_tokens,
            warned: AtomicBool::new(false),
        })
    }

    /// The same backend multiplying convolutions by `p` (instead of `OXINFER_CUDA_CONV`'s
    /// choice).
    pub fn with_conv_path(mut self, p: ConvPath) -> Self {
        self.conv_path = p;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gpu> {
        self.gpu.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn note(&self, kind: String, start: Instant, up: usize, down: usize) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let e = s.entry(kind).or_insert((0, 0.0, 0, 0));
        e.0 += 1;
        e.1 += start.elapsed().as_secs_f64();
        e.2 += up as u64;
        e.3 += down as u64;
    }

    /// One whole-plan pass on the decoder stack (`run_plan` / `run_plan_scored`); `down` is
    /// the bytes that come back, for the stats. False when the stack declines the plan.
    fn stack_pass(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        out: Out<'_>,
        down: usize,
    ) -> bool {
        let t = input.t();
        if t == 0 || input.x.len() != t * plan.dim {
            return false;
        }
        let Some(d) = crate::stack::lower(self, plan).filter(crate::stack::supported) else {
            return false;
        };
        let start = Instant::now();
        let mut g = self.lock();
        let r = crate::stack_run::run(&self.gpu, &mut g, self.path, &d, input, seqs, out);
        drop(g);
        match r {
            Ok(done) => {
                let kind = if t <= seqs.len() {
                    "run_plan decode"
                } else {
                    "run_plan"
                };
                self.note(kind.to_string(), start, input.x.len() * 4, down);
                done
            }
            Err(e) => self.fail("run_plan", e),
        }
    }

    /// Reports a device failure once (the op then runs on the CPU).
    fn fail(&self, what: &str, e: String) -> bool {
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!("[{}: {what} failed: {e}; running it on the CPU]", self.name);
        }
        false
    }

    fn matmul_inner(&self, x: &[f32], t: usize, jobs: &mut [Job]) -> Result<bool, String> {
        let mats: Vec<&DeviceMatrix> = match jobs
            .iter()
            .map(|j| j.dev.downcast_ref::<DeviceMatrix>())
            .collect::<Option<Vec<_>>>()
        {
            Some(m) => m,
            None => return Ok(false),
        };
        let start = Instant::now();
        let mut g = self.lock();
        g.bind()?;
        let xp = g.scratch(Slot::X, std::mem::size_of_val(x))?;
        g.upload(xp, x)?;
        let mut ready = None;
        let mut down = 0;
        for (j, m) in jobs.iter_mut().zip(&mats) {
            let y = g.scratch(Slot::Y, j.y.len() * 4)?;
            gemm::linear(&mut g, m, xp, t, y, self.path, &mut ready)?;
            g.download(j.y, y)?;
            down += j.y.len() * 4;
        }
        drop(g);
        let kind = format!("matmul {}", mats[0].format);
        self.note(kind, start, std::mem::size_of_val(x), down);
        Ok(true)
    }

    fn attention_inner(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        a: &AttentionGeom,
        out: &mut [f32],
    ) -> Result<(), String> {
        let start = Instant::now();
        let kv_len = a.n_keys() * a.shape.n_kv_heads * a.shape.head_dim;
        let (k, v) = (&k[..kv_len], &v[..kv_len]);
        let mut g = self.lock();
        g.bind()?;
        let qp = g.scratch(Slot::X, std::mem::size_of_val(q))?;
        let kp = g.scratch(Slot::K, kv_len * 4)?;
        let vp = g.scratch(Slot::V, kv_len * 4)?;
        let op = g.scratch(Slot::Y, std::mem::size_of_val(out))?;
        g.upload(qp, q)?;
        g.upload(kp, k)?;
        g.upload(vp, v)?;
        if a.t <= ops::SPLIT_ATTN_MAX_ROWS {
            let splits = ops::attention_splits(a, oxinfer::plan::KvType::F32);
            let part_len = ops::attention_part_len(a.t, &a.shape, splits);
            let part = g.scratch(Slot::AttPart, part_len * 4)?;
            // Each row's position, each row's sequence (0), then the one sequence's key and
            // value addresses (u64 each, 8-byte aligned).
            let mut rows: Vec<u32> = (a.pos0..a.n_keys()).map(|p| p as u32).collect();
            rows.resize(2 * a.t, 0);
            let table_at = rows.len() * 4;
            rows.extend(ops::KvRows::entry(kp, vp));
            let pp = g.scratch(Slot::Pos, rows.len() * 4)?;
            g.upload(pp, &rows)?;
            let kv = ops::KvRows {
                table: pp + table_at as u64,
                rseq: pp + (a.t * 4) as u64,
                layout: KvLayout::F32,
            };
            ops::attention_split(&g, qp, kv, op, part, pp, a, splits, None)?;
        } else {
            let kv = (kp, vp, KvLayout::F32);
            ops::attention(&g, qp, kv, op, a, self.path != QuantPath::Exact)?;
        }
        g.download(out, op)?;
        drop(g);
        self.note(
            "attention".to_string(),
            start,
            (q.len() + 2 * kv_len) * 4,
            out.len() * 4,
        );
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn gated_mlp_inner(
        &self,
        x: &[f32],
        t: usize,
        gate: &DeviceMatrix,
        up: &DeviceMatrix,
        down: &DeviceMatrix,
        act: GateAct,
        y: &mut [f32],
    ) -> Result<(), String> {
        let start = Instant::now();
        let ffn = gate.rows;
        let mut g = self.lock();
        g.bind()?;
        let xp = g.scratch(Slot::X, std::mem::size_of_val(x))?;
        g.upload(xp, x)?;
        let gp = g.scratch(Slot::G, t * ffn * 4)?;
        let up_p = g.scratch(Slot::U, t * ffn * 4)?;
        let yp = g.scratch(Slot::Y, y.len() * 4)?;
        let mut ready = None;
        gemm::linear(&mut g, gate, xp, t, gp, self.path, &mut ready)?;
        gemm::linear(&mut g, up, xp, t, up_p, self.path, &mut ready)?;
        ops::gated_act(&g, gp, up_p, t * ffn, act)?;
        gemm::linear(&mut g, down, gp, t, yp, self.path, &mut ready)?;
        g.download(y, yp)?;
        drop(g);
        self.note(
            format!("gated_mlp {}/{}", gate.format, down.format),
            start,
            std::mem::size_of_val(x),
            std::mem::size_of_val(y),
        );
        Ok(())
    }

    /// Registers and spill bytes of the GEMM kernels as compiled for this device.
    pub fn kernel_report(&self) -> String {
        self.lock().k.resource_report()
    }

    /// `w` uploaded (for the measuring and checking entry points below), or why not.
    fn uploaded(&self, w: &WeightMatrix) -> Result<DeviceWeight, String> {
        self.upload(w)
            .ok_or_else(|| format!("{} weights not taken", w.format))
    }

    /// Block-quantized `w` decoded on the device by its format's whole-matrix f32 decoder (the
    /// exact path's; every kernel decodes with the same per-format code), `[rows, cols]`
    /// row-major: for checking the device decoders against the CPU dequantizer.
    ///
    /// # Errors
    /// A format the device does not decode, or a device failure.
    pub fn dequantize(&self, w: &WeightMatrix) -> Result<Vec<f32>, String> {
        if !w.format.is_quantized() {
            return Err(format!("{} is not a block format", w.format));
        }
        let dev = self.uploaded(w)?;
        let m = as_matrix(&dev)?;
        let mut g = self.lock();
        g.bind()?;
        let dst = g.scratch(Slot::W16, m.rows * m.cols * 4)?;
        ops::dequant(&g, m, dst, false)?;
        let mut out = vec![0f32; m.rows * m.cols];
        g.download(&mut out, dst)?;
        Ok(out)
    }

    /// Seconds per `[t, k] × [n, k]ᵀ` matmul with weights in `format` already on the device
    /// (random contents; transfers excluded), the mean of `reps` after one warm-up. For GEMM
    /// throughput measurements.
    pub fn time_gemm(
        &self,
        format: WeightFormat,
        n: usize,
        k: usize,
        t: usize,
        path: QuantPath,
        reps: usize,
    ) -> Result<f64, String> {
        let mut g = self.lock();
        let w = random_device_matrix(&g, format, n, k)?;
        let x16 = g.scratch(Slot::X16, t * k * path.elem_bytes())?;
        let y = g.scratch(Slot::Y, t * n * 4)?;
        gemm::matmul(&mut g, &w, x16, y, t, path, None)?;
        g.sync()?;
        let start = Instant::now();
        for _ in 0..reps {
            gemm::matmul(&mut g, &w, x16, y, t, path, None)?;
        }
        g.sync()?;
        Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
    }

    /// Seconds per quantized GEMV `[t, k] × [n, k]ᵀ` (`t` ≤ 8 rows; random weights in `format`
    /// on the device, activations already quantized; transfers excluded), the mean of `reps`
    /// after one warm-up. For bandwidth measurements.
    ///
    /// # Errors
    /// A format without a GEMV, or a device failure.
    pub fn time_gemv(
        &self,
        format: WeightFormat,
        n: usize,
        k: usize,
        t: usize,
        reps: usize,
    ) -> Result<f64, String> {
        let mut g = self.lock();
        let w = random_device_matrix(&g, format, n, k)?;
        if !gemm::uses_gemv(&w, t) {
            return Err(format!("{format} with {t} rows takes no GEMV"));
        }
        let x = g.scratch(Slot::X16, t * k * 4)?;
        let y = g.scratch(Slot::Y, t * n * 4)?;
        // SAFETY: `x` holds t·k f32 in this context; queued on the stream.
        unsafe { cudarc::driver::sys::cuMemsetD32Async(x, 0x3c00_0000, t * k, g.stream) }
            .result()
            .map_err(|e| format!("memset: {e:?}"))?;
        // Scales and run sums (ops::int8_side_bytes) for either block size.
        let xd = g.scratch(Slot::XScale, ops::int8_side_bytes(t * k, 32))?;
        // The int8 kernels read the same bytes as int8 values and a scale per 256.
        let run = |g: &Gpu| {
            if gemm::has_int8_gemv(format) {
                // The layout a model's product takes (the constant input reads the same).
                let grouped = gemm::int8_layout(&w, t).is_some_and(|l| l.grouped);
                gemv::gemv_i8(g, &w, &[], x, xd, y, t, GemvOut::Store, grouped)
            } else {
                gemv::gemv(g, &w, x, y, t)
            }
        };
        // SAFETY: `xd` holds t·k/16 words in this context; queued on the stream.
        unsafe { cudarc::driver::sys::cuMemsetD32Async(xd, 0x3c00_0000, t * k / 16, g.stream) }
            .result()
            .map_err(|e| format!("memset: {e:?}"))?;
        run(&g)?;
        g.sync()?;
        let start = Instant::now();
        for _ in 0..reps {
            run(&g)?;
        }
        g.sync()?;
        Ok(start.elapsed().as_secs_f64() / reps.max(1) as f64)
    }

    /// Seconds of device time per convolution (norm statistics and implicit GEMM; transfers
    /// excluded, weights decoded beforehand), the mean of `reps` after one warm-up. For
    /// throughput measurements.
    ///
    /// # Errors
    /// A weight format or shape the device does not take, or a device failure.
    pub fn time_conv(
        &self,
        x: &[f32],
        g: &ConvGeom,
        norm: Option<&NormSpec>,
        w: &WeightMatrix,
        reps: usize,
    ) -> Result<f64, String> {
        let dev = self.uploaded(w)?;
        let m = as_matrix(&dev)?;
        if !crate::conv::supported(x, g, norm, m, g.oh * g.ow * m.rows) {
            return Err(format!("convolution {g:?} not taken"));
        }
        let mut gpu = self.lock();
        crate::conv::time(&mut gpu, self.conv_path, x, g, norm, m, reps)
    }
}

/// `n × k` weights in `format` with deterministic filler bytes (small f16 scales so values stay
/// finite), uploaded to the device: for throughput measurements.
fn random_device_matrix(
    g: &Gpu,
    format: WeightFormat,
    n: usize,
    k: usize,
) -> Result<DeviceMatrix, String> {
    if !gemm::supported(format) || (format.is_quantized() && !g.k.handles(format)) {
        return Err(format!("{format} is not handled on the device"));
    }
    let row_bytes = format
        .row_bytes(k)
        .ok_or_else(|| format!("{k} columns do not fill {format} blocks"))?;
    let mut bytes = vec![0u8; n * row_bytes];
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    for b in bytes.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = (s >> 24) as u8 & 0x3b;
    }
    g.bind()?;
    Ok(DeviceMatrix::new(
        format,
        n,
        k,
        row_bytes,
        DevBuf::from_host(&g.ctx, &bytes)?,
    ))
}

impl Backend for CudaBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn wants(&self, _n_out: usize, _n_in: usize, t: usize) -> bool {
        t >= self.min_tokens
    }

    fn upload(&self, w: &WeightMatrix) -> Option<DeviceWeight> {
        // f16/bf16 rows of any width: cuBLAS and the element-wise converters take any `k`, and
        // convolution weights are `k²·cin` wide (27 for a 3×3 over RGB).
        let any_width = matches!(w.format, WeightFormat::F16 | WeightFormat::BF16);
        if !gemm::supported(w.format) || (!w.cols.is_multiple_of(16) && !any_width) {
            return None;
        }
        let start = Instant::now();
        let g = self.lock();
        // The IQ formats' kernels are a second program, which may have failed to compile (said
        // once when the backend opened).
        if w.format.is_quantized() && !g.k.handles(w.format) {
            return None;
        }
        let buf = match g.bind().and_then(|_| DevBuf::from_host(&g.ctx, w.data)) {
            Ok(b) => b,
            Err(e) => {
                drop(g);
                self.fail("upload", e);
                return None;
            }
        };
        drop(g);
        self.note("upload".to_string(), start, w.data.len(), 0);
        Some(Box::new(DeviceMatrix::new(
            w.format,
            w.rows,
            w.cols,
            w.row_bytes(),
            buf,
        )))
    }

    fn matmul(&self, x: &[f32], t: usize, n_in: usize, jobs: &mut [Job]) -> bool {
        if jobs.is_empty() || x.len() != t * n_in {
            return false;
        }
        match self.matmul_inner(x, t, jobs) {
            Ok(done) => done,
            Err(e) => self.fail("matmul", e),
        }
    }

    fn conv2d(&self, x: &[f32], g: &ConvGeom, norm: Option<&NormSpec>, job: &mut Job) -> bool {
        let Some(m) = job.dev.downcast_ref::<DeviceMatrix>() else {
            return false;
        };
        if !crate::conv::supported(x, g, norm, m, job.y.len()) {
            return false;
        }
        let start = Instant::now();
        let mut gpu = self.lock();
        let r = crate::conv::run(&mut gpu, self.conv_path, x, g, norm, m, job.y);
        drop(gpu);
        match r {
            Ok(()) => {
                let kind = match self.conv_path {
                    ConvPath::F32 => format!("conv2d {}", m.format),
                    ConvPath::Bf16 => format!("conv2d {} mma", m.format),
                };
                self.note(kind, start, std::mem::size_of_val(x), job.y.len() * 4);
                true
            }
            Err(e) => self.fail("conv2d", e),
        }
    }

    fn attention(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        g: &AttentionGeom,
        out: &mut [f32],
    ) -> bool {
        let kv_len = g.n_keys() * g.shape.n_kv_heads * g.shape.head_dim;
        let ok_shape = g.t >= self.min_tokens
            && g.shape.head_dim.is_multiple_of(32)
            && g.shape.head_dim <= 256
            && g.shape.n_kv_heads > 0
            && g.shape.n_heads.is_multiple_of(g.shape.n_kv_heads)
            && q.len() == g.t * g.shape.n_heads * g.shape.head_dim
            && out.len() == q.len()
            && k.len() >= kv_len
            && v.len() >= kv_len;
        if !ok_shape {
            return false;
        }
        match self.attention_inner(q, k, v, g, out) {
            Ok(()) => true,
            Err(e) => self.fail("attention", e),
        }
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
        let (Some(g), Some(u), Some(d)) = (
            gate.dev.downcast_ref::<DeviceMatrix>(),
            up.dev.downcast_ref::<DeviceMatrix>(),
            down.dev.downcast_ref::<DeviceMatrix>(),
        ) else {
            return false;
        };
        let shapes_ok = g.rows == u.rows
            && g.cols == u.cols
            && d.cols == g.rows
            && x.len() == t * g.cols
            && y.len() == t * d.rows;
        if !shapes_ok {
            return false;
        }
        match self.gated_mlp_inner(x, t, g, u, d, act, y) {
            Ok(()) => true,
            Err(e) => self.fail("gated_mlp", e),
        }
    }

    fn holds_kv(&self, types: KvTypes) -> bool {
        types.k == types.v
    }

    fn run_plan(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        logits: &mut [f32],
    ) -> bool {
        let down = 4 * logits.len();
        self.stack_pass(plan, input, seqs, Out::Logits(logits), down)
    }

    fn run_encoder(&self, plan: &EncoderPlan, x: &[f32], lens: &[usize], out: &mut [f32]) -> bool {
        let start = Instant::now();
        let mut g = self.lock();
        let r = crate::encoder::run(&mut g, plan, x, lens, out);
        drop(g);
        match r {
            Ok(done) => {
                if done {
                    self.note("run_encoder".to_string(), start, x.len() * 4, out.len() * 4);
                }
                done
            }
            Err(e) => self.fail("run_encoder", e),
        }
    }

    fn run_plan_scored(
        &self,
        plan: &Plan,
        input: &PlanInput,
        seqs: &mut [SeqRows<'_>],
        targets: &[u32],
        scores: &mut [RowScore],
    ) -> bool {
        let down = 16 * scores.len();
        self.stack_pass(plan, input, seqs, Out::Scores { targets, scores }, down)
    }

    fn stats(&self) -> Option<String> {
        let kernels = self
            .gpu
            .lock()
            .ok()
            .and_then(|g| g.bind().ok().and_then(|_| g.kernel_report()));
        let s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        if s.is_empty() {
            return kernels;
        }
        let mut out = format!("{} device ops (wall time incl. transfers):\n", self.name);
        for (k, (calls, secs, up, down)) in s.iter() {
            out.push_str(&format!(
                "  {k:<16} {calls:>7} calls {:>10.2} ms  up {:>9.1} MB  down {:>9.1} MB\n",
                secs * 1e3,
                *up as f64 / 1e6,
                *down as f64 / 1e6
            ));
        }
        out.push_str(kernels.as_deref().unwrap_or(""));
        Some(out)
    }
}

/// The device matrix behind an uploaded weight.
fn as_matrix(dev: &DeviceWeight) -> Result<&DeviceMatrix, String> {
    dev.downcast_ref::<DeviceMatrix>()
        .ok_or_else(|| "not a device matrix".to_string())
}
