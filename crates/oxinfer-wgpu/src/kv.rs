//! [`WgpuKv`]: one sequence's keys and values in a device buffer, the mirror the plan runner
//! attaches to each [`oxinfer::plan::KvCache`] it runs ([`oxinfer::plan::DeviceKv`]; the
//! ownership rule is in `oxinfer::backend::plan_run`).
//!
//! Layout: one f32 buffer `[2][layers][cap][kv_row]` (keys, then values), position `p` of a
//! layer in row `p` (sliding-window layers too: attention skips rows outside the window).
//! `cap` grows by doubling up to the cache's capacity.

use crate::gpu::Gpu;
use oxinfer::plan::DeviceKv;
use std::any::Any;
use std::sync::Arc;

/// Rows allocated per layer before the first growth.
const FIRST_CAP: usize = 256;

/// Keys and values of one sequence on one device.
pub(crate) struct WgpuKv {
    gpu: Arc<Gpu>,
    layers: usize,
    kv_row: usize,
    /// Positions the cache may ever hold (the host cache's capacity).
    capacity: usize,
    /// Rows allocated per layer.
    cap: usize,
    buf: Option<wgpu::Buffer>,
    len: usize,
}

impl std::fmt::Debug for WgpuKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuKv")
            .field("layers", &self.layers)
            .field("kv_row", &self.kv_row)
            .field("cap", &self.cap)
            .field("len", &self.len)
            .finish()
    }
}

impl WgpuKv {
    /// An empty mirror of `layers` layers of rows of `kv_row` f32, at most `capacity`
    /// positions (nothing allocated yet).
    pub(crate) fn new(gpu: Arc<Gpu>, layers: usize, kv_row: usize, capacity: usize) -> Self {
        WgpuKv {
            gpu,
            layers,
            kv_row,
            capacity,
            cap: 0,
            buf: None,
            len: 0,
        }
    }

    /// Whether this mirror belongs to the device `gpu` and has this geometry.
    pub(crate) fn fits(&self, gpu: &Arc<Gpu>, layers: usize, kv_row: usize) -> bool {
        Arc::ptr_eq(&self.gpu, gpu) && self.layers == layers && self.kv_row == kv_row
    }

    /// Element offset of row 0 of layer `layer`'s keys (`values` false) or values.
    pub(crate) fn at(&self, layer: usize, values: bool) -> usize {
        ((usize::from(values) * self.layers + layer) * self.cap) * self.kv_row
    }

    /// Makes room for `rows` positions per layer, keeping the stored ones; returns the
    /// buffer.
    pub(crate) fn reserve(&mut self, rows: usize) -> Result<wgpu::Buffer, String> {
        if let Some(b) = self.buf.as_ref().filter(|_| rows <= self.cap) {
            return Ok(b.clone());
        }
        let cap = rows
            .max(2 * self.cap)
            .max(FIRST_CAP)
            .min(self.capacity.max(rows));
        let bytes = (2 * self.layers * cap * self.kv_row * 4) as u64;
        if !self.gpu.fits(bytes) {
            return Err(format!(
                "a KV cache of {cap} positions ({bytes} bytes) exceeds the device's buffer limit"
            ));
        }
        let buf = self.gpu.buffer("kv", bytes);
        if let Some(old) = &self.buf {
            let n = (self.len * self.kv_row * 4) as u64;
            for part in 0..2 * self.layers {
                let (src, dst) = (part * self.cap, part * cap);
                if n > 0 {
                    let (src, dst) = (
                        (src * self.kv_row * 4) as u64,
                        (dst * self.kv_row * 4) as u64,
                    );
                    self.gpu.copy(old, src, &buf, dst, n)?;
                }
            }
        }
        self.buf = Some(buf.clone());
        self.cap = cap;
        Ok(buf)
    }

    /// Records that positions up to `len` are stored (after the pass that wrote them).
    pub(crate) fn set_len(&mut self, len: usize) {
        self.len = len;
    }
}

impl DeviceKv for WgpuKv {
    fn len(&self) -> usize {
        self.len
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    fn read(&self, layer: usize, from: usize, to: usize) -> Result<(Vec<f32>, Vec<f32>), String> {
        if layer >= self.layers || from > to || to > self.len {
            return Err(format!(
                "rows {from}..{to} of layer {layer}: the device KV cache holds {} rows of {} layers",
                self.len, self.layers
            ));
        }
        let n = (to - from) * self.kv_row;
        let (mut k, mut v) = (vec![0f32; n], vec![0f32; n]);
        let Some(buf) = self.buf.as_ref().filter(|_| n > 0) else {
            return Ok((k, v));
        };
        let row = from * self.kv_row;
        let (ka, va) = (self.at(layer, false) + row, self.at(layer, true) + row);
        self.gpu
            .run(&[], &mut [(buf, ka, &mut k), (buf, va, &mut v)])?;
        Ok((k, v))
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
