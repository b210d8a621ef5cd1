//! [`DeviceKvCache`]: one sequence's keys and values in device memory, the mirror the decoder
//! stack attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: keys and values each `[layers, cap, kv_row]` values of the cache's [`KvElem`] (the
//! host cache's type, keys and values alike; a block type's rows whole blocks, rotated as the
//! CPU stores them: [`KvLayout`]), position `p` of a layer in row
//! `p` (sliding-window layers too: their attention skips the rows outside the window, and the
//! rows a host ring dropped are never read). `cap` grows by doubling up to the cache's capacity.
//! The rows hold the host type's bytes exactly (the kernels round as the CPU's `half`
//! conversions do), so host rows go up and device rows come down without changing a value.

use crate::gpu::{DevBuf, Gpu};
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::plan::{DeviceKv, KvType, KvTypes, MirrorRows};
use oxinfer_kernels::attention::{kv_rotation, KvRole, KvView};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// The element type of a device KV cache: the host cache's [`KvType`] when the device holds
/// it (keys and values of one type). The order is the kernels' (`KvF32::CODE` … `KvQ4_0::CODE`
/// in common.cuh) and the per-type kernel arrays'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KvElem {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
}

impl KvElem {
    /// Every element type, in the kernels' order.
    pub const ALL: [KvElem; 5] = [
        KvElem::F32,
        KvElem::F16,
        KvElem::Bf16,
        KvElem::Q8_0,
        KvElem::Q4_0,
    ];

    /// The device type of a cache storing `types`, when the device holds it.
    pub fn of(types: KvTypes) -> Option<KvElem> {
        if types.k != types.v {
            return None;
        }
        Some(match types.k {
            KvType::F32 => KvElem::F32,
            KvType::F16 => KvElem::F16,
            KvType::Bf16 => KvElem::Bf16,
            KvType::Q8_0 => KvElem::Q8_0,
            KvType::Q4_0 => KvElem::Q4_0,
        })
    }

    /// The host type.
    pub fn ty(self) -> KvType {
        match self {
            KvElem::F32 => KvType::F32,
            KvElem::F16 => KvType::F16,
            KvElem::Bf16 => KvType::Bf16,
            KvElem::Q8_0 => KvType::Q8_0,
            KvElem::Q4_0 => KvType::Q4_0,
        }
    }

    /// Bytes of one row of `width` values (the host's: a block type's row is whole blocks).
    pub fn row_bytes(self, width: usize) -> usize {
        self.ty().row_bytes(width)
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
            KvElem::Q8_0 => "_kv_q8_0",
            KvElem::Q4_0 => "_kv_q4_0",
        }
    }

    /// `rows` rows of `width` values stored as this type's bytes, as f32 (the CPU's decoding).
    fn widen(self, bytes: &[u8], rows: usize, width: usize) -> Vec<f32> {
        match self {
            KvElem::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            _ => KvView::Packed {
                ty: self.ty(),
                data: bytes,
            }
            .to_f32(0..rows, width),
        }
    }
}

/// How the caches of one pass store their rows: the element type, and the chunk widths keys
/// and values were rotated in before being stored (0: not rotated), the CPU's rule for a
/// block type ([`kv_rotation`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KvLayout {
    pub elem: KvElem,
    pub krot: i32,
    pub vrot: i32,
}

impl KvLayout {
    /// Plain f32 rows.
    pub const F32: KvLayout = KvLayout {
        elem: KvElem::F32,
        krot: 0,
        vrot: 0,
    };

    /// The layout of a cache storing `types` for heads of `head_dim`, when the device holds it.
    pub fn of(types: KvTypes, head_dim: usize) -> Option<KvLayout> {
        let elem = KvElem::of(types)?;
        let chunk = |role| kv_rotation(elem.ty(), head_dim, role).unwrap_or(0) as i32;
        Some(KvLayout {
            elem,
            krot: chunk(KvRole::Key),
            vrot: chunk(KvRole::Value),
        })
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
        self.elem.row_bytes(self.rows.kv_row)
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
        let rb = self.elem.row_bytes(kv_row);
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
        let rows = to - from;
        let bytes = rows * self.row_bytes();
        let (mut k, mut v) = (vec![0u8; bytes], vec![0u8; bytes]);
        let mut g = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        g.bind()?;
        let (kp, vp) = self.layer(layer);
        let at = (from * self.row_bytes()) as CUdeviceptr;
        g.download(&mut k, kp + at)?;
        g.download(&mut v, vp + at)?;
        let width = self.rows.kv_row;
        Ok((
            self.elem.widen(&k, rows, width),
            self.elem.widen(&v, rows, width),
        ))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
