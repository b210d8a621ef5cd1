//! [`DeviceMatrix`]: a weight matrix uploaded once, kept in its storage format (GGUF blocks,
//! split quants and scales, or floats), and the matmul built on it ([`linear`]).

use crate::gpu::Gpu;
use crate::kernels::{
    self, u, words, Buf, Dispatch, Kernel, MatvecShape, FORMATS, MATMUL_OUT_ROWS, MATMUL_ROWS,
    MATVEC_FORMATS,
};
use oxinfer_kernels::vecdot::{act_kind, ActKind};
use oxinfer_kernels::{WeightFormat, WeightMatrix};

/// A `[rows, cols]` weight on the device, in one or more parts of consecutive rows: a matrix
/// larger than the device lets one storage binding be (lavapipe: 128 MiB, less than Gemma 3's
/// 178 MB output head) is split by rows, and its product runs one dispatch per part.
#[derive(Debug)]
pub struct DeviceMatrix {
    /// Unique in this process ([`oxinfer::backend::next_upload_id`]): identifies the loaded
    /// model a pass comes from (`stack_run::consts_key`).
    pub(crate) id: u64,
    pub(crate) format: WeightFormat,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    /// Bytes of one row in a part's `w`.
    pub(crate) row_bytes: usize,
    /// Bytes of one row's scales in a part's `s` (split formats; else 0).
    pub(crate) scale_row_bytes: usize,
    pub(crate) parts: Vec<MatrixPart>,
}

/// Rows `row0..row0 + rows` of a [`DeviceMatrix`]: their weights and (split formats) scales.
#[derive(Debug)]
pub(crate) struct MatrixPart {
    pub(crate) row0: usize,
    pub(crate) rows: usize,
    pub(crate) w: wgpu::Buffer,
    pub(crate) s: Option<wgpu::Buffer>,
}

impl DeviceMatrix {
    /// Uploads `m`; `None` when the kernels do not decode its format or one row exceeds the
    /// device's buffer limits. (Block formats have whole blocks per row; float rows may have
    /// any width.)
    pub(crate) fn upload(g: &Gpu, m: &WeightMatrix) -> Option<DeviceMatrix> {
        let (row_bytes, scale_row_bytes) = (m.row_bytes(), m.row_scale_bytes());
        if !FORMATS.contains(&m.format) || m.rows == 0 {
            return None;
        }
        // Rows per part: its bytes, padded to 4, within one binding.
        let room = g.max_binding().saturating_sub(4) as usize;
        let per_part = [row_bytes, scale_row_bytes]
            .iter()
            .filter(|&&b| b > 0)
            .map(|&b| room / b)
            .min()?
            .min(m.rows);
        if per_part == 0 {
            return None;
        }
        let parts = (0..m.rows)
            .step_by(per_part)
            .map(|row0| {
                let rows = per_part.min(m.rows - row0);
                let w = &m.data[row0 * row_bytes..(row0 + rows) * row_bytes];
                let s = (scale_row_bytes > 0).then(|| {
                    let s = &m.scales[row0 * scale_row_bytes..(row0 + rows) * scale_row_bytes];
                    g.buffer_init("scales", s)
                });
                MatrixPart {
                    row0,
                    rows,
                    w: g.buffer_init("weights", w),
                    s,
                }
            })
            .collect();
        Some(DeviceMatrix {
            id: oxinfer::backend::next_upload_id(),
            format: m.format,
            rows: m.rows,
            cols: m.cols,
            row_bytes,
            scale_row_bytes,
            parts,
        })
    }

    /// Activation values per int8 block the CPU rounds this format's inputs through (`None`:
    /// f32 inputs).
    pub(crate) fn act_block(&self) -> Option<usize> {
        if !int8_inputs() {
            return None;
        }
        match act_kind(self.format) {
            ActKind::F32 => None,
            ActKind::Q8 => Some(32),
            ActKind::Q8K => Some(256),
        }
    }
}

/// Whether the inputs of quantized products are rounded through int8 blocks as the CPU's
/// integer kernels round them (`OXINFER_WGPU_INT8_INPUTS=1`; `shaders/quant.wgsl`), so the
/// device multiplies the CPU's values. Off by default: products then take the f32 inputs, the
/// exact path's sums (`OXINFER_KERNELS=scalar`, `oxinfer_kernels::matmul_reference`), at the
/// same cost (the matmul reads f32 inputs either way) and one dispatch fewer per input. The CPU's
/// agreement is not bit-for-bit in either mode: its RMSNorm sums in f64 and its products in
/// another order, and a last-bit difference moves values across int8 rounding boundaries.
pub fn int8_inputs() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXINFER_WGPU_INT8_INPUTS").is_ok_and(|v| v == "1"))
}

/// Whether one-row products of [`MATVEC_FORMATS`] take the matvec kernel (`matvec.wgsl`; the
/// default) rather than the matmul (`OXINFER_WGPU_MATVEC=0`, for A/B measurements).
pub(crate) fn matvec_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OXINFER_WGPU_MATVEC").map_or(true, |v| v != "0"))
}

/// `y[t][n] (row stride ld) = x[t][k] · Wᵀ` with `x` at `x` in `a`, `y` at `y` in `out`: one
/// dispatch per part of `m`, each writing its rows' columns of `y`.
#[allow(clippy::too_many_arguments)]
fn matmul_dispatches(
    m: &DeviceMatrix,
    a: &Buf,
    x: usize,
    out: &Buf,
    y: usize,
    ld: usize,
    t: usize,
    list: &mut Vec<Dispatch>,
) {
    // The matvec reads activations as vec4: its input must start at a multiple of 4.
    let matvec = t == 1 && x.is_multiple_of(4) && MATVEC_FORMATS.contains(&m.format) && matvec_on();
    let shape = MatvecShape::get();
    let lanes = shape.lanes(m.format, m.cols);
    for p in &m.parts {
        let mut bufs = vec![(1, a.clone()), (2, out.clone()), (3, p.w.clone())];
        if let Some(s) = &p.s {
            bufs.push((4, s.clone()));
        }
        let (kernel, groups) = if matvec {
            let rows = shape.rows_per_group(lanes);
            (Kernel::Matvec(m.format), p.rows.div_ceil(rows))
        } else {
            let groups = p.rows.div_ceil(MATMUL_OUT_ROWS) * t.div_ceil(MATMUL_ROWS);
            (Kernel::Matmul(m.format), groups)
        };
        list.push(Dispatch {
            kernel,
            params: words(&[
                u(x),
                u(y + p.row0),
                u(p.rows),
                u(m.cols),
                u(t),
                u(m.row_bytes),
                u(m.scale_row_bytes),
                u(ld),
                u(lanes),
            ]),
            bufs,
            groups: u(groups),
        });
    }
}

/// Where a [`linear`] reads, writes and stages.
pub(crate) struct LinearIo<'a> {
    /// The activations (inputs and the int8-rounded copy).
    pub a: &'a Buf,
    /// Input `[t, cols]` at this offset of `a`.
    pub x: usize,
    /// Room for `t · cols` rounded activations in `a`.
    pub xq: usize,
    /// Output buffer and offset, rows `ld` apart.
    pub out: &'a Buf,
    pub y: usize,
    pub ld: usize,
}

/// `y = x · Wᵀ` for `t` rows as the CPU computes it: inputs of quantized formats rounded
/// through int8 blocks first, then the weights decoded in their blocks. `ready` names the
/// input and block size whose rounding already lies in `io.xq` (products of one input share
/// it; the caller clears it when the input changes).
pub(crate) fn linear(
    m: &DeviceMatrix,
    io: &LinearIo,
    t: usize,
    ready: &mut Option<(usize, usize)>,
    out: &mut Vec<Dispatch>,
) {
    let x = match m.act_block() {
        Some(size) => {
            if *ready != Some((io.x, size)) {
                out.push(kernels::quant(io.a, io.x, io.xq, t * m.cols / size, size));
                *ready = Some((io.x, size));
            }
            io.xq
        }
        None => io.x,
    };
    matmul_dispatches(m, io.a, x, io.out, io.y, io.ld, t, out);
}
