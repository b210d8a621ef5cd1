//! The device context: one CUDA context, one stream, one cuBLAS handle, the compiled kernels,
//! device buffers and grow-only scratch space. Used behind the backend's mutex, one op at a time.

use crate::graph::{launch_kernel, Graphs, Recorder};
use crate::kernel_profile::{self, KernelProfile};
use crate::kernels::Kernels;
use cudarc::cublas::{result as blas, sys as blas_sys};
use cudarc::driver::{result, sys, CudaContext};
use std::cell::{Cell, RefCell};
use std::sync::Arc;

/// Whether the CUDA driver library can be opened; every driver call is guarded by this, since
/// `cudarc` panics when a dynamically loaded library is absent.
pub(crate) fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda under its usual names and closes it again.
    unsafe { sys::is_culib_present() }
}

/// A device allocation, freed on drop.
pub(crate) struct DevBuf {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: a device pointer is an address in the context's memory, usable from any thread once
// the context is bound; the buffer owns it exclusively.
unsafe impl Send for DevBuf {}
// SAFETY: as above; all access goes through the backend's mutex.
unsafe impl Sync for DevBuf {}

/// Bytes every [`DevBuf`] allocates past its size (never written, only over-read by aligned
/// 16-byte copies).
pub(crate) const DEV_BUF_SLACK: usize = 16;

impl DevBuf {
    /// Allocates `bytes` (at least 1) on `ctx`'s device, plus [`DEV_BUF_SLACK`] readable bytes
    /// past the end (the staged GEMV copies whole aligned 16-byte chunks, which may cover up to
    /// 15 bytes after a matrix's last row).
    pub fn new(ctx: &Arc<CudaContext>, bytes: usize) -> Result<Self, String> {
        ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        // SAFETY: plain allocation in the bound context.
        let ptr = unsafe { result::malloc_sync(bytes + DEV_BUF_SLACK) }
            .map_err(|e| format!("cuMemAlloc of {bytes} bytes: {e:?}"))?;
        Ok(DevBuf {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    /// Allocates and fills with `data`; the bytes are on the device when this returns.
    ///
    /// `cuMemcpyHtoD` from pageable memory returns once `data` is staged for the DMA, which
    /// may still be in flight, on the legacy stream, with which the backend's non-blocking
    /// stream does not synchronize: a kernel launched next could read the buffer before the
    /// copy lands (seen as garbage logits when many uploads share the copy engines, e.g. the
    /// device tests run in parallel). So the legacy stream is synchronized after the copy.
    pub fn from_host<T>(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self, String> {
        let b = Self::new(ctx, std::mem::size_of_val(data))?;
        // SAFETY: `b` holds exactly size_of_val(data) bytes; the null stream is the bound
        // context's legacy stream, on which the copy was issued.
        unsafe {
            result::memcpy_htod_sync(b.ptr, data)
                .and_then(|_| sys::cuStreamSynchronize(std::ptr::null_mut()).result())
        }
        .map_err(|e| format!("upload of {} bytes: {e:?}", b.bytes))?;
        Ok(b)
    }

    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` was allocated by malloc_sync in this context and is freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory, the staging area of every transfer: the DMA engines read and write
/// it directly, where pageable memory goes through a slow driver-side bounce (2.3 GB/s measured
/// on the H200 machine, against tens of GB/s pinned).
struct Pinned {
    ptr: *mut u8,
    bytes: usize,
}

impl Pinned {
    fn empty() -> Self {
        Pinned {
            ptr: std::ptr::null_mut(),
            bytes: 0,
        }
    }

    /// Grows to at least `bytes` (contents lost).
    fn grow(&mut self, bytes: usize) -> Result<*mut u8, String> {
        if self.bytes < bytes {
            *self = Pinned::empty();
            let want = bytes + bytes / 4;
            // SAFETY: plain page-locked allocation in the bound context.
            let ptr = unsafe { result::malloc_host(want, 0) }
                .map_err(|e| format!("cuMemHostAlloc of {want} bytes: {e:?}"))?;
            *self = Pinned {
                ptr: ptr as *mut u8,
                bytes: want,
            };
        }
        Ok(self.ptr)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated by cuMemHostAlloc and freed once.
            let _ = unsafe { result::free_host(self.ptr as *mut std::ffi::c_void) };
        }
    }
}

/// Copies `bytes` bytes from `src` to `dst` on the thread pool in 1 MiB pieces (one thread
/// copies far below what the bus takes).
///
/// # Safety
/// `src` and `dst` must be valid for `bytes` bytes and must not overlap.
unsafe fn par_copy(dst: *mut u8, src: *const u8, bytes: usize) {
    const PIECE: usize = 1 << 20;
    let (d, s) = (dst as usize, src as usize);
    oxinfer_kernels::pool::parallel_for(bytes.div_ceil(PIECE), &|i| {
        let off = i * PIECE;
        let n = PIECE.min(bytes - off);
        // SAFETY: pieces are disjoint and inside both ranges (caller's contract).
        unsafe { std::ptr::copy_nonoverlapping((s + off) as *const u8, (d + off) as *mut u8, n) };
    });
}

/// Everything one op needs on the device.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: sys::CUstream,
    pub blas: blas_sys::cublasHandle_t,
    pub k: Kernels,
    scratch: Vec<Option<DevBuf>>,
    pinned: Pinned,
    /// Whether copies queued from `pinned` may still be reading it ([`Self::upload_many_queued`]).
    staging_busy: bool,
    /// What the decoder stack last packed into [`Slot::Params`] (`OXINFER_CUDA_STEP_HOST=new`):
    /// the key of what was packed (`stack_params::key`) and where each part lies.
    pub params: Option<(Vec<usize>, crate::stack_params::StackParams)>,
    /// The values last uploaded there by the default preparation (compared every pass; see
    /// `stack_switches::step_host_old`).
    pub params_host_old: Vec<f32>,
    /// The packed norm gains and biases last uploaded into [`Slot::EncParams`] (the encoder pass
    /// re-uploads them only when they change).
    pub enc_params_host: Vec<f32>,
    /// The decode step being recorded for a CUDA graph (see [`crate::graph`]).
    rec: RefCell<Recorder>,
    /// The graphs of recent decode steps.
    pub graphs: Graphs,
    /// Streaming multiprocessors of the device (sizes the int8 GEMV's grid, [`crate::ops`]).
    pub sm_count: usize,
    /// Per-kernel launch timings (`OXINFER_CUDA_PROFILE=kernels`; graphs are off then).
    prof: Option<RefCell<KernelProfile>>,
    /// Weight bytes the next launch reads, declared by the GEMV launchers for the profile.
    next_bytes: Cell<u64>,
    /// Kernels launched as programmatic dependents of the previous one (compute 9.0+, unless
    /// `OXINFER_CUDA_PDL=0`).
    pdl: bool,
    /// Staged one-row int8 GEMVs copy each unit's rows with one bulk copy (the TMA of compute
    /// 9.0+) instead of 16-byte chunks from every lane (unless `OXINFER_CUDA_GEMV_BULK=0`;
    /// measured in docs/gpu.md).
    pub(crate) bulk_staging: bool,
}

// SAFETY: the raw stream, cuBLAS handle and pinned buffer belong to this context and are only
// used while the backend's mutex is held, from whichever thread holds it (the context is bound
// first).
unsafe impl Send for Gpu {}

/// Named scratch slots.
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    /// Input activations, f32.
    X = 0,
    /// Input activations converted to bf16/f16.
    X16 = 1,
    /// Output, f32.
    Y = 2,
    /// Dequantized weights (bf16) for the cuBLAS path.
    W16 = 3,
    /// Attention keys.
    K = 4,
    /// Attention values.
    V = 5,
    /// Gated MLP: gate projection, f32.
    G = 6,
    /// Gated MLP: up projection, f32.
    U = 7,
    /// Decoder stack: the normed hidden state, f32.
    Norm = 8,
    /// Decoder stack: queries, f32.
    Q = 9,
    /// Decoder stack: attention output, f32.
    Att = 10,
    /// Decoder stack: one layer's new keys, `[t, kv_row]` f32.
    KNew = 11,
    /// Decoder stack: one layer's new values.
    VNew = 12,
    /// Decoder stack: norm gains and biases of every layer, packed (kept between passes).
    Params = 13,
    /// Decoder stack: logits.
    Logits = 14,
    /// Decoder stack: RoPE rows and logit row indices of one pass, packed.
    PerPass = 15,
    /// Decoder stack: the gathered rows that need logits, f32.
    Rows = 16,
    /// Matmul input scaling: `[amax bits, alpha, beta]` (written by `ops::amax`).
    Scale = 17,
    /// Convolution: the norm's gamma and beta `[cin]` each, then its (mean, rstd) pairs.
    ConvNorm = 18,
    /// Split decode attention: per (row, head, slice) the partial output, max and sum.
    AttPart = 19,
    /// int8 GEMV input: one f32 scale per block of the int8 activations in `X16`.
    XScale = 20,
    /// Split decode attention of a single op: the query rows' positions, i32.
    Pos = 21,
    /// Decoder stack: per logit row its score (log-probability of the target, argmax), f64 pairs.
    Scores = 22,
    /// Encoder pass: the hidden state `[T, dim]`.
    EncX = 23,
    /// Encoder pass: queries, keys and values side by side, `[T, 3 dim]`.
    EncQkv = 24,
    /// Encoder pass: the attention's output `[T, dim]`.
    EncAtt = 25,
    /// Encoder pass: a projection back to the hidden width `[T, dim]`.
    EncY = 26,
    /// Encoder pass: the MLP's (gate or up) projection `[T, ffn]`.
    EncG = 27,
    /// Encoder pass: a gated MLP's up projection `[T, ffn]`.
    EncU = 28,
    /// Encoder pass: biases and LayerNorm parameters of every layer, packed.
    EncParams = 29,
    /// Encoder pass: the first row of each sequence and the total, i32.
    EncSeq = 30,
    /// Encoder pass: rotary cosines `[rows, half]`, then sines (the same shape).
    EncRope = 31,
    /// Encoder pass: each row's row of the rotary tables, i32.
    EncRopeRow = 32,
    /// Encoder pass, pre-norm: the normalized input of the next sublayer `[T, dim]`.
    EncNormed = 33,
    /// Encoder pass: a clamped product's input `[T, widest input]`.
    EncClamped = 34,
}

impl Gpu {
    /// Opens device `ordinal`: context, stream, cuBLAS, kernels.
    pub fn open(ordinal: usize) -> Result<Self, String> {
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("creating a context: {e:?}"))?;
        ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| format!("compute capability: {e:?}"))?;
        if major < 8 {
            return Err(format!(
                "compute capability {major}.{minor}: the kernels need 8.0 or newer (bf16 tensor cores)"
            ));
        }
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| format!("creating a stream: {e:?}"))?;
        // SAFETY: probing dlopen only.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err("cuBLAS (libcublas) was not found".to_string());
        }
        let handle = blas::create_handle().map_err(|e| format!("cublasCreate: {e:?}"))?;
        // SAFETY: handle and stream are live and belong to this context.
        unsafe { blas::set_stream(handle, stream as _) }
            .map_err(|e| format!("cublasSetStream: {e:?}"))?;
        let k = Kernels::compile(&ctx, major, minor)?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| format!("multiprocessor count: {e:?}"))?
            .max(1) as usize;
        Ok(Gpu {
            ctx,
            stream,
            blas: handle,
            k,
            scratch: Vec::new(),
            pinned: Pinned::empty(),
            staging_busy: false,
            params: None,
            params_host_old: Vec::new(),
            enc_params_host: Vec::new(),
            rec: RefCell::default(),
            graphs: Graphs::default(),
            sm_count,
            prof: kernel_profile::enabled().then(RefCell::default),
            next_bytes: Cell::new(0),
            pdl: major >= 9 && std::env::var("OXINFER_CUDA_PDL").map_or(true, |v| v != "0"),
            bulk_staging: major >= 9
                && std::env::var("OXINFER_CUDA_GEMV_BULK").map_or(true, |v| v != "0"),
        })
    }

    /// Binds the context to the calling thread.
    pub fn bind(&self) -> Result<(), String> {
        self.ctx.bind_to_thread().map_err(|e| format!("{e:?}"))
    }

    /// Scratch buffer `slot` of at least `bytes` (grown, never shrunk; contents undefined).
    pub fn scratch(&mut self, slot: Slot, bytes: usize) -> Result<sys::CUdeviceptr, String> {
        self.scratch_fresh(slot, bytes).map(|(p, _)| p)
    }

    /// [`Self::scratch`], and whether the buffer was (re)allocated now (its old contents are
    /// gone).
    pub fn scratch_fresh(
        &mut self,
        slot: Slot,
        bytes: usize,
    ) -> Result<(sys::CUdeviceptr, bool), String> {
        let i = slot as usize;
        if self.scratch.len() <= i {
            self.scratch.resize_with(i + 1, || None);
        }
        let fits = self.scratch[i].as_ref().is_some_and(|b| b.bytes() >= bytes);
        if !fits {
            // Recorded launches may name the old buffer: issue them before it is freed.
            self.flush_recording()?;
            self.scratch[i] = None;
            // Grow by 1/4 more than asked so slowly growing sizes do not reallocate each call.
            self.scratch[i] = Some(DevBuf::new(&self.ctx, bytes + bytes / 4)?);
        }
        Ok((
            self.scratch[i].as_ref().map(|b| b.ptr()).unwrap_or(0),
            !fits,
        ))
    }

    /// The pinned staging buffer, grown to at least `bytes`.
    /// Copies queued from it by [`Self::upload_many_queued`] are waited for first when the host
    /// is to write it (`host_writes`) or it must grow (which frees it); a device-to-host copy
    /// queued after them on the stream needs no wait.
    fn staging(&mut self, bytes: usize, host_writes: bool) -> Result<*mut u8, String> {
        if self.staging_busy && (host_writes || self.pinned.bytes < bytes) {
            self.sync()?;
            self.staging_busy = false;
        }
        self.pinned.grow(bytes)
    }

    /// Copies `src` to device address `dst` through the pinned staging buffer; returns when
    /// the copy is done (the staging buffer is free again).
    pub fn upload<T: Copy>(&mut self, dst: sys::CUdeviceptr, src: &[T]) -> Result<(), String> {
        let bytes = std::mem::size_of_val(src);
        let p = self.staging(bytes, true)?;
        // SAFETY: `p` holds at least `bytes`; `src` is `bytes` long; distinct allocations. The
        // device copy reads `p` and completes (synchronized) before `p` is reused; callers
        // pass a `dst` with room for `bytes`.
        unsafe {
            par_copy(p, src.as_ptr() as *const u8, bytes);
            sys::cuMemcpyHtoDAsync_v2(dst, p as *const std::ffi::c_void, bytes, self.stream)
                .result()
                .map_err(|e| format!("upload of {bytes} bytes: {e:?}"))?;
        }
        self.sync()
    }

    /// Copies each `(dst, src)` of `parts` to its device address through the pinned staging
    /// buffer (one staging pass, one wait at the end).
    pub fn upload_many(&mut self, parts: &[(sys::CUdeviceptr, HostSrc<'_>)]) -> Result<(), String> {
        self.upload_many_queued(parts)?;
        self.staging_busy = false;
        self.sync()
    }

    /// [`Self::upload_many`] without the wait: the copies are queued on the stream (so kernels
    /// queued after them read the new values) and the host may return to its work at once; the
    /// next use of the staging buffer waits for them. `src` is copied into the staging buffer
    /// before this returns, so the caller may drop it.
    pub fn upload_many_queued(
        &mut self,
        parts: &[(sys::CUdeviceptr, HostSrc<'_>)],
    ) -> Result<(), String> {
        let bytes: usize = parts.iter().map(|(_, s)| s.len_bytes()).sum();
        let p = self.staging(bytes, true)?;
        let mut off = 0;
        for (dst, src) in parts {
            let n = src.len_bytes();
            // SAFETY: `p` holds `bytes` ≥ off + n; `src` is n bytes; distinct allocations; the
            // device copy reads `p + off` and completes before `p` is written or freed again
            // (`staging_busy`: `staging` waits for it, and so does Drop's sync); callers pass
            // a `dst` with room for `n` bytes.
            unsafe {
                par_copy(p.add(off), src.as_ptr(), n);
                sys::cuMemcpyHtoDAsync_v2(
                    *dst,
                    p.add(off) as *const std::ffi::c_void,
                    n,
                    self.stream,
                )
                .result()
                .map_err(|e| format!("upload of {n} bytes: {e:?}"))?;
            }
            off += n;
        }
        self.staging_busy = true;
        Ok(())
    }

    /// Copies device address `src` into `dst` through the pinned staging buffer, after all
    /// queued work.
    pub fn download<T: Copy>(
        &mut self,
        dst: &mut [T],
        src: sys::CUdeviceptr,
    ) -> Result<(), String> {
        let bytes = std::mem::size_of_val(dst);
        let p = self.staging(bytes, false)?;
        // SAFETY: `src` holds at least `bytes` (callers' contract), `p` holds at least `bytes`;
        // the stream is synchronized before `p` is read.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(p as *mut std::ffi::c_void, src, bytes, self.stream)
                .result()
                .map_err(|e| format!("download of {bytes} bytes: {e:?}"))?;
            self.sync()?;
            self.staging_busy = false;
            par_copy(dst.as_mut_ptr() as *mut u8, p, bytes);
        }
        Ok(())
    }

    /// Device-to-device copy of `bytes` on the stream; both ranges must lie in live device
    /// buffers of this context.
    pub fn copy(
        &self,
        dst: sys::CUdeviceptr,
        src: sys::CUdeviceptr,
        bytes: usize,
    ) -> Result<(), String> {
        if self.rec.borrow_mut().copy(dst, src, bytes) {
            return Ok(());
        }
        // SAFETY: both ranges are inside live device buffers of this context (callers' contract).
        unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.stream) }
            .result()
            .map_err(|e| format!("device copy of {bytes} bytes: {e:?}"))
    }

    /// Waits for all queued work.
    pub fn sync(&self) -> Result<(), String> {
        // SAFETY: the stream is live.
        unsafe { result::stream::synchronize(self.stream) }.map_err(|e| format!("{e:?}"))?;
        if let Some(p) = &self.prof {
            p.borrow_mut().collect();
        }
        Ok(())
    }

    /// The per-kernel time table when kernels are timed (`--profile`), after waiting for the
    /// queued work.
    pub fn kernel_report(&self) -> Option<String> {
        let p = self.prof.as_ref()?;
        self.sync().ok()?;
        let mut p = p.borrow_mut();
        p.reported = true;
        Some(p.report(&self.k.names)).filter(|s| !s.is_empty())
    }

    /// Declares that the next launch reads `bytes` bytes of weights (for the GB/s column of
    /// `OXINFER_CUDA_PROFILE=kernels`).
    pub fn declare_bytes(&self, bytes: usize) {
        self.next_bytes.set(bytes as u64);
    }

    /// Launches `f` on the stream with `params` (pointers to each argument value).
    pub fn launch(
        &self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), String> {
        self.launch_smem(f, grid, block, 0, params)
    }

    /// [`Self::launch`] with `smem` bytes of dynamic shared memory.
    pub fn launch_smem(
        &self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        smem: u32,
        params: &mut [*mut std::ffi::c_void],
    ) -> Result<(), String> {
        let pdl = self.pdl && self.k.dependents.contains(&(f as usize));
        let recorded = self
            .rec
            .borrow_mut()
            .kernel(f, grid, block, smem, params, pdl);
        match recorded {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => {
                eprintln!("oxinfer-cuda: cannot record launches for CUDA graphs ({e})");
                self.flush_recording()?;
            }
        }
        let bytes = self.next_bytes.replace(0);
        let timed = match &self.prof {
            Some(p) => Some(p.borrow_mut().before(self.stream)?),
            None => None,
        };
        // SAFETY: `f` is a kernel of our module whose signature the callers match argument by
        // argument; the pointed-to values live until this call returns.
        unsafe { launch_kernel(f, (grid, block, smem), self.stream, params, pdl) }?;
        match (&self.prof, timed) {
            (Some(p), Some(ev)) => p.borrow_mut().after(self.stream, f, bytes, ev),
            _ => Ok(()),
        }
    }
}

impl Gpu {
    /// Starts recording launches and device copies instead of issuing them (a decode step
    /// whose every op can be captured); nothing happens when graphs are disabled.
    pub fn start_recording(&self) {
        if !self.graphs.disabled && self.prof.is_none() {
            self.rec.borrow_mut().ops = Some(Vec::new());
        }
    }

    /// Stops recording and issues what was recorded as plain launches (before an op that
    /// cannot be recorded, such as a cuBLAS call or a memset, or a buffer reallocation).
    pub fn flush_recording(&self) -> Result<(), String> {
        let ops = self.rec.borrow_mut().ops.take();
        ops.map_or(Ok(()), |ops| {
            ops.iter().try_for_each(|op| op.issue(self.stream))
        })
    }

    /// Stops recording and runs what was recorded as a CUDA graph (replayed when an earlier
    /// recording was identical, else captured now).
    pub fn finish_recording(&mut self) -> Result<(), String> {
        let ops = self.rec.borrow_mut().ops.take();
        match ops {
            Some(ops) => self.graphs.run(ops, self.stream),
            None => Ok(()),
        }
    }

    /// Stops recording and drops what was recorded (after an error).
    pub fn discard_recording(&self) {
        self.rec.borrow_mut().ops = None;
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        let _ = self.bind();
        let _ = self.sync();
        if let Some(p) = &self.prof {
            if !p.borrow().reported {
                eprint!("{}", p.borrow().report(&self.k.names));
            }
            p.borrow_mut().clear();
        }
        self.graphs.clear();
        self.scratch.clear();
        self.pinned = Pinned::empty();
        // SAFETY: the handle and the stream are live and destroyed once.
        unsafe {
            let _ = blas::destroy_handle(self.blas);
            let _ = result::stream::destroy(self.stream);
        }
    }
}

/// Host memory [`Gpu::upload_many`] copies: f32 values, or the bytes of another type (a KV
/// cache's f16 / bf16 rows).
#[derive(Clone, Copy, Debug)]
pub enum HostSrc<'a> {
    F32(&'a [f32]),
    Bytes(&'a [u8]),
}

impl HostSrc<'_> {
    /// Bytes to copy.
    pub fn len_bytes(&self) -> usize {
        match self {
            HostSrc::F32(x) => std::mem::size_of_val(*x),
            HostSrc::Bytes(b) => b.len(),
        }
    }

    /// Whether there is nothing to copy.
    pub fn is_empty(&self) -> bool {
        self.len_bytes() == 0
    }

    /// The first byte.
    fn as_ptr(&self) -> *const u8 {
        match self {
            HostSrc::F32(x) => x.as_ptr() as *const u8,
            HostSrc::Bytes(b) => b.as_ptr(),
        }
    }
}
