//! [`WgpuKv`]: one sequence's keys and values in a device buffer, the mirror the plan runner
//! attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: one f32 buffer `[2][layers][cap][kv_row]` (keys, then values), position `p` of a
//! layer in row `p` (sliding-window layers too: attention skips rows outside the window).
//! `cap` grows by doubling up to the cache's capacity.

use crate::gpu::Gpu;
use oxinfer::plan::{DeviceKv, MirrorRows};
use std::any::Any;
use std::sync::Arc;

/// Keys and values of one sequence on one device.
pub(crate) struct WgpuKv {
    gpu: Arc<Gpu>,
    /// Geometry, rows allocated per layer, positions stored.
    rows: MirrorRows,
    buf: Option<wgpu::Buffer>,
}

impl std::fmt::Debug for WgpuKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuKv").field("rows", &self.rows).finish()
    }
}

impl WgpuKv {
    /// An empty mirror of `layers` layers of rows of `kv_row` f32, at most `capacity`
    /// positions (nothing allocated yet).
    pub(crate) fn new(gpu: Arc<Gpu>, layers: usize, kv_row: usize, capacity: usize) -> Self {
        WgpuKv {
            gpu,
            rows: MirrorRows::new(layers, kv_row, capacity),
            buf: None,
        }
    }

    /// Whether this mirror belongs to the device `gpu` and has this geometry.
    pub(crate) fn fits(&self, gpu: &Arc<Gpu>, layers: usize, kv_row: usize) -> bool {
        Arc::ptr_eq(&self.gpu, gpu) && self.rows.fits(layers, kv_row)
    }

    /// Element offset of row 0 of layer `layer`'s keys (`values` false) or values.
    pub(crate) fn at(&self, layer: usize, values: bool) -> usize {
        ((usize::from(values) * self.rows.layers + layer) * self.rows.cap) * self.rows.kv_row
    }

    /// Makes room for `rows` positions per layer, keeping the stored ones; returns the
    /// buffer.
    pub(crate) fn reserve(&mut self, rows: usize) -> Result<wgpu::Buffer, String> {
        // `cap` is 0 until the first buffer, so a first call allocates (even for 0 rows: the
        // passes bind a buffer).
        let cap = match (self.rows.grown_cap(rows.max(1)), &self.buf) {
            (None, Some(b)) => return Ok(b.clone()),
            (grown, _) => grown.unwrap_or(self.rows.cap.max(1)),
        };
        let MirrorRows {
            layers,
            kv_row,
            cap: old_cap,
            len,
            ..
        } = self.rows;
        let bytes = (2 * layers * cap * kv_row * 4) as u64;
        if !self.gpu.fits(bytes) {
            return Err(format!(
                "a KV cache of {cap} positions ({bytes} bytes) exceeds the device's buffer limit"
            ));
        }
        let buf = self.gpu.buffer("kv", bytes);
        if let Some(old) = &self.buf {
            let n = (len * kv_row * 4) as u64;
            for part in 0..2 * layers {
                let (src, dst) = (part * old_cap, part * cap);
                if n > 0 {
                    let (src, dst) = ((src * kv_row * 4) as u64, (dst * kv_row * 4) as u64);
                    self.gpu.copy(old, src, &buf, dst, n)?;
                }
            }
        }
        self.buf = Some(buf.clone());
        self.rows.cap = cap;
        Ok(buf)
    }

    /// Records that positions up to `len` are stored (after the pass that wrote them).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.rows.len = len;
    }
}

impl DeviceKv for WgpuKv {
    fn len(&self) -> usize {
        self.rows.len
    }

    fn truncate(&mut self, len: usize) {
        self.rows.truncate(len);
    }

    fn read(&self, layer: usize, from: usize, to: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
        let n = self.rows.read_len(layer, from, to)?;
        let (mut k, mut v) = (vec![0f32; n], vec![0f32; n]);
        let Some(buf) = self.buf.as_ref().filter(|_| n > 0) else {
            return Ok((k, v));
        };
        let row = from * self.rows.kv_row;
        let (ka, va) = (self.at(layer, false) + row, self.at(layer, true) + row);
        self.gpu
            .run(&[], &mut [(buf, ka, &mut k), (buf, va, &mut v)])?;
        Ok((k, v))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
