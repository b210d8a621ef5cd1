//! [`DeviceKvCache`]: one sequence's keys and values in device memory, the mirror the decoder
//! stack attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: keys and values each `[layers, cap, kv_row]` values of the cache's [`KvElem`] (the
//! host cache's type: f32, f16 or bf16, keys and values alike), position `p` of a layer in row
//! `p` (sliding-window layers too: their attention skips the rows outside the window, and the
//! rows a host ring dropped are never read). `cap` grows by doubling up to the cache's capacity.
//! The rows hold the host type's bytes exactly (the kernels round as the CPU's `half`
//! conversions do), so host rows go up and device rows come down without changing a value.

use crate::gpu::{DevBuf, Gpu};
use cudarc::driver::sys::CUdeviceptr;
use half::{bf16, f16};
use oxinfer::plan::{DeviceKv, KvType, KvTypes, MirrorRows};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// The element type of a device KV cache: the host cache's [`KvType`] when the device holds
/// it (f32, f16, bf16; keys and values of one type). The order is the kernels' (`KvF32`,
/// `KvF16`, `KvBf16::CODE` in common.cuh) and the per-type kernel arrays'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KvElem {
    F32,
    F16,
    Bf16,
}

impl KvElem {
    /// Every element type, in the kernels' order.
    pub const ALL: [KvElem; 3] = [KvElem::F32, KvElem::F16, KvElem::Bf16];

    /// The device type of a cache storing `types`, when the device holds it.
    pub fn of(types: KvTypes) -> Option<KvElem> {
        if types.k != types.v {
            return None;
        }
        match types.k {
            KvType::F32 => Some(KvElem::F32),
            KvType::F16 => Some(KvElem::F16),
            KvType::Bf16 => Some(KvElem::Bf16),
            KvType::Q8_0 | KvType::Q4_0 => None,
        }
    }

    /// Bytes per value.
    pub fn bytes(self) -> usize {
        match self {
            KvElem::F32 => 4,
            KvElem::F16 | KvElem::Bf16 => 2,
        }
    }

    /// The kernels' code for it (`KvF32::CODE` …).
    pub fn code(self) -> i32 {
        self as i32
    }

    /// Index into the per-type kernel arrays.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The suffix of its kernels' names (`""` for f32).
    pub fn kernel_suffix(self) -> &'static str {
        match self {
            KvElem::F32 => "",
            KvElem::F16 => "_kv_f16",
            KvElem::Bf16 => "_kv_bf16",
        }
    }

    /// Values stored as this type's bytes (little-endian), widened back to f32.
    fn widen(self, bytes: &[u8]) -> Vec<f32> {
        let pairs = bytes.chunks_exact(2).map(|b| [b[0], b[1]]);
        match self {
            KvElem::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            KvElem::F16 => pairs.map(|b| f16::from_le_bytes(b).to_f32()).collect(),
            KvElem::Bf16 => pairs.map(|b| bf16::from_le_bytes(b).to_f32()).collect(),
        }
    }
}

/// Keys and values of one sequence on one GPU.
pub(crate) struct DeviceKvCache {
    /// The backend's device state (reads lock it; the stack pass passes its guard instead).
    gpu: Arc<Mutex<Gpu>>,
    /// Geometry, rows allocated per layer, positions stored.
    rows: MirrorRows,
    /// The type of every stored value.
    elem: KvElem,
    k: Option<DevBuf>,
    v: Option<DevBuf>,
}

impl std::fmt::Debug for DeviceKvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceKvCache")
            .field("rows", &self.rows)
            .field("elem", &self.elem)
            .finish()
    }
}

impl DeviceKvCache {
    /// An empty mirror of `layers` layers of rows of `kv_row` values of type `elem`, at most
    /// `capacity` positions, on the backend whose device state is `gpu` (nothing allocated
    /// yet).
    pub fn new(
        gpu: Arc<Mutex<Gpu>>,
        layers: usize,
        kv_row: usize,
        capacity: usize,
        elem: KvElem,
    ) -> Self {
        DeviceKvCache {
            gpu,
            rows: MirrorRows::new(layers, kv_row, capacity),
            elem,
            k: None,
            v: None,
        }
    }

    /// Whether this mirror belongs to the backend of `gpu` and has this geometry and type.
    pub fn fits(&self, gpu: &Arc<Mutex<Gpu>>, layers: usize, kv_row: usize, elem: KvElem) -> bool {
        Arc::ptr_eq(&self.gpu, gpu) && self.rows.fits(layers, kv_row) && self.elem == elem
    }

    /// Bytes of one stored row.
    fn row_bytes(&self) -> usize {
        self.rows.kv_row * self.elem.bytes()
    }

    /// Makes room for `rows` positions per layer, keeping the stored ones (device copies on
    /// the stream; the old buffers are freed after the stream drained).
    pub fn reserve(&mut self, g: &Gpu, rows: usize) -> Result<(), String> {
        let Some(cap) = self.rows.grown_cap(rows) else {
            return Ok(());
        };
        let MirrorRows {
            layers,
            kv_row,
            cap: old_cap,
            len,
            ..
        } = self.rows;
        let rb = kv_row * self.elem.bytes();
        let bytes = layers * cap * rb;
        let (k, v) = (DevBuf::new(&g.ctx, bytes)?, DevBuf::new(&g.ctx, bytes)?);
        if let (Some(ok), Some(ov)) = (&self.k, &self.v) {
            let n = len * rb;
            for l in 0..layers {
                let (src, dst) = (l * old_cap * rb, l * cap * rb);
                if n > 0 {
                    g.copy(k.ptr() + dst as u64, ok.ptr() + src as u64, n)?;
                    g.copy(v.ptr() + dst as u64, ov.ptr() + src as u64, n)?;
                }
            }
            g.sync()?;
        }
        self.k = Some(k);
        self.v = Some(v);
        self.rows.cap = cap;
        Ok(())
    }

    /// Device addresses of layer `layer`'s keys and values, row 0 (after [`Self::reserve`]).
    pub fn layer(&self, layer: usize) -> (CUdeviceptr, CUdeviceptr) {
        let off = (layer * self.rows.cap * self.row_bytes()) as CUdeviceptr;
        let base = |b: &Option<DevBuf>| b.as_ref().map_or(0, |b| b.ptr()) + off;
        (base(&self.k), base(&self.v))
    }

    /// Records that positions up to `len` are stored (after the pass that wrote them).
    pub fn set_len(&mut self, len: usize) {
        self.rows.len = len;
    }
}

impl DeviceKv for DeviceKvCache {
    fn len(&self) -> usize {
        self.rows.len
    }

    fn truncate(&mut self, len: usize) {
        self.rows.truncate(len);
    }

    fn read(&self, layer: usize, from: usize, to: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
        let n = self.rows.read_len(layer, from, to)?;
        if n == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let bytes = n * self.elem.bytes();
        let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
        let mut g = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        g.bind()?;
        let (kp, vp) = self.layer(layer);
        let at = (from * self.row_bytes()) as CUdeviceptr;
        g.download(&mut k, kp + at)?;
        g.download(&mut v, vp + at)?;
        Ok((self.elem.widen(&k), self.elem.widen(&v)))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
