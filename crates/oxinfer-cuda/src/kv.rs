//! [`DeviceKvCache`]: one sequence's keys and values in device memory, the mirror the decoder
//! stack attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: keys and values each `[layers, cap, kv_row]` values of the host cache's type (keys
//! and values alike; a block type's rows whole blocks, rotated as the CPU stores them:
//! [`KvLayout`]), position `p` of a layer in row
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

/// Where `ty`'s kernels sit in the per-type kernel arrays: its place in [`KvType::ALL`], which
/// is also the kernels' `CODE` (`KvF32::CODE` … `KvQ4_0::CODE` and `KV_TYPES` in common.cuh).
pub(crate) fn kernel_index(ty: KvType) -> usize {
    KvType::ALL
        .iter()
        .position(|&t| t == ty)
        .expect("every KvType is in KvType::ALL")
}

/// The suffix of `ty`'s kernels' names (`""` for f32, `"_kv_f16"`, … `"_kv_q4_0"`).
pub(crate) fn kernel_suffix(ty: KvType) -> &'static str {
    match ty {
        KvType::F32 => "",
        KvType::F16 => "_kv_f16",
        KvType::Bf16 => "_kv_bf16",
        KvType::Q8_0 => "_kv_q8_0",
        KvType::Q4_0 => "_kv_q4_0",
    }
}

/// `rows` rows of `width` values stored as `ty`'s bytes, as f32 (the CPU's decoding).
fn widen(ty: KvType, bytes: &[u8], rows: usize, width: usize) -> Vec<f32> {
    match ty {
        KvType::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        _ => KvView::Packed { ty, data: bytes }.to_f32(0..rows, width),
    }
}

/// How the caches of one pass store their rows: the host cache's type (keys and values alike),
/// and the chunk widths keys and values were rotated in before being stored (0: not rotated),
/// the CPU's rule for a block type ([`kv_rotation`]). A block type's blocks never straddle two
/// heads: the stack takes heads of a multiple of 32 only (`stack::supported`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KvLayout {
    pub elem: KvType,
    pub krot: i32,
    pub vrot: i32,
}

impl KvLayout {
    /// Plain f32 rows.
    pub const F32: KvLayout = KvLayout {
        elem: KvType::F32,
        krot: 0,
        vrot: 0,
    };

    /// The layout of a cache storing `types` for heads of `head_dim`, when the device holds it
    /// (keys and values of one type).
    pub fn of(types: KvTypes, head_dim: usize) -> Option<KvLayout> {
        let elem = (types.k == types.v).then_some(types.k)?;
        let chunk = |role| kv_rotation(elem, head_dim, role).unwrap_or(0) as i32;
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
    elem: KvType,
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
        elem: KvType,
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
    pub fn fits(&self, gpu: &Arc<Mutex<Gpu>>, layers: usize, kv_row: usize, elem: KvType) -> bool {
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
            widen(self.elem, &k, rows, width),
            widen(self.elem, &v, rows, width),
        ))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
