//! [`DeviceKvCache`]: one sequence's keys and values in device memory, the mirror the decoder
//! stack attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: keys and values each `[layers, cap, kv_row]` f32, position `p` of a layer in row
//! `p` (sliding-window layers too: their attention skips the rows outside the window, and the
//! rows a host ring dropped are never read). `cap` grows by doubling up to the cache's capacity.

use crate::gpu::{DevBuf, Gpu};
use cudarc::driver::sys::CUdeviceptr;
use oxinfer::plan::{DeviceKv, MirrorRows};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// Keys and values of one sequence on one GPU.
pub(crate) struct DeviceKvCache {
    /// The backend's device state (reads lock it; the stack pass passes its guard instead).
    gpu: Arc<Mutex<Gpu>>,
    /// Geometry, rows allocated per layer, positions stored.
    rows: MirrorRows,
    k: Option<DevBuf>,
    v: Option<DevBuf>,
}

impl std::fmt::Debug for DeviceKvCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceKvCache")
            .field("rows", &self.rows)
            .finish()
    }
}

impl DeviceKvCache {
    /// An empty mirror of `layers` layers of rows of `kv_row` f32, at most `capacity`
    /// positions, on the backend whose device state is `gpu` (nothing allocated yet).
    pub fn new(gpu: Arc<Mutex<Gpu>>, layers: usize, kv_row: usize, capacity: usize) -> Self {
        DeviceKvCache {
            gpu,
            rows: MirrorRows::new(layers, kv_row, capacity),
            k: None,
            v: None,
        }
    }

    /// Whether this mirror belongs to the backend of `gpu` and has this geometry.
    pub fn fits(&self, gpu: &Arc<Mutex<Gpu>>, layers: usize, kv_row: usize) -> bool {
        Arc::ptr_eq(&self.gpu, gpu) && self.rows.fits(layers, kv_row)
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
        let bytes = layers * cap * kv_row * 4;
        let (k, v) = (DevBuf::new(&g.ctx, bytes)?, DevBuf::new(&g.ctx, bytes)?);
        if let (Some(ok), Some(ov)) = (&self.k, &self.v) {
            let n = len * kv_row * 4;
            for l in 0..layers {
                let (src, dst) = (l * old_cap * kv_row * 4, l * cap * kv_row * 4);
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
        let off = (layer * self.rows.cap * self.rows.kv_row * 4) as CUdeviceptr;
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
        let (mut k, mut v) = (vec![0f32; n], vec![0f32; n]);
        if n == 0 {
            return Ok((k, v));
        }
        let mut g = self.gpu.lock().unwrap_or_else(|e| e.into_inner());
        g.bind()?;
        let (kp, vp) = self.layer(layer);
        let at = (from * self.rows.kv_row * 4) as CUdeviceptr;
        g.download(&mut k, kp + at)?;
        g.download(&mut v, vp + at)?;
        Ok((k, v))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
