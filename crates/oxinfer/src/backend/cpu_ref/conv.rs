//! The CPU reference of [`Backend::conv2d`](crate::backend::Backend::conv2d): 2-D convolution
//! over channels-last activations, with an optional GroupNorm / LayerNorm (+ SiLU) fused into its
//! input (normalize, unfold in row blocks, matmul). [`crate::nn::conv2d`] offers the op to the
//! installed backend first.
//!
//! Layouts (see [`ConvGeom`]): input `x` `[h * w, cin]`, output `y` `[oh * ow, n_out]`, weights
//! `[n_out][ky][kx][cin]` as a [`WeightMatrix`] of `n_out` rows and `k * k * cin` columns in any
//! format the CPU kernels read. Padding is `k / 2` zeros on every side, added *after* the
//! normalization (padded taps contribute 0, not `norm(0)`), so
//! `oh = (h + 2 * (k / 2) - k) / stride + 1` (and the same for `ow`). The bias, if any, is the
//! caller's to add. [`conv2d_cpu_images`] runs the same convolution over a batch of images
//! stored one after another (`[images][h * w][cin]` in, `[images][oh * ow][n_out]` out), the
//! weight packed once for all of their pixels. [`conv2d_cpu_images_packed`] takes a weight a
//! layer packed once ([`PackedFloatMatrix`], kept between calls) instead.

use crate::backend::{ConvGeom, NormKind, NormSpec};
use oxinfer_kernels::packed::float::{matmul_float_packed, pack_for_call, PackedFloatMatrix};
use oxinfer_kernels::WeightMatrix;
use std::borrow::Cow;
use std::sync::Mutex;

/// A convolution whose arguments do not fit together; the message names the tensor and the
/// dimension at fault.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("conv2d: {0}")]
pub struct ConvError(pub String);

fn bad<T>(what: String) -> Result<T, ConvError> {
    Err(ConvError(what))
}

/// Output size of one spatial dimension: `(n + 2 * (k / 2) - k) / stride + 1`, or `None` when
/// `n`, `k` or `stride` is 0.
pub fn conv_out_size(n: usize, k: usize, stride: usize) -> Option<usize> {
    if n == 0 || k == 0 || stride == 0 {
        return None;
    }
    Some((n + 2 * (k / 2)).checked_sub(k)? / stride + 1)
}

/// The geometry of a `k × k` convolution of stride `stride` over `[h * w, cin]`, with the output
/// size computed.
///
/// # Errors
/// A zero dimension, kernel size or stride.
pub fn conv_geom(
    h: usize,
    w: usize,
    cin: usize,
    k: usize,
    stride: usize,
) -> Result<ConvGeom, ConvError> {
    if cin == 0 {
        return bad("input channels (cin) is 0".to_string());
    }
    match (conv_out_size(h, k, stride), conv_out_size(w, k, stride)) {
        (Some(oh), Some(ow)) => Ok(ConvGeom {
            h,
            w,
            cin,
            k,
            stride,
            oh,
            ow,
        }),
        _ => bad(format!(
            "height {h}, width {w}, kernel size {k} and stride {stride} must all be nonzero"
        )),
    }
}

/// Checks the geometry against itself, `x` against `images` inputs of it, and the normalization
/// against `cin` (what [`conv_input_norm`] needs).
fn check_geom_norm(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
) -> Result<(), ConvError> {
    let want = conv_geom(g.h, g.w, g.cin, g.k, g.stride)?;
    if (g.oh, g.ow) != (want.oh, want.ow) {
        return bad(format!(
            "output size {}x{} (oh x ow) does not follow from input {}x{}, kernel size {} and \
             stride {}: expected {}x{}",
            g.oh, g.ow, g.h, g.w, g.k, g.stride, want.oh, want.ow
        ));
    }
    let n_x = g.h.checked_mul(g.w).and_then(|v| v.checked_mul(g.cin));
    if n_x.and_then(|v| v.checked_mul(images)) != Some(x.len()) {
        return bad(format!(
            "input x has {} values, expected {}h * w * cin = {} * {} * {}",
            x.len(),
            images_times(images),
            g.h,
            g.w,
            g.cin
        ));
    }
    if let Some(n) = norm {
        for (name, v) in [("gamma", n.gamma), ("beta", n.beta)] {
            if v.len() != g.cin {
                return bad(format!(
                    "norm {name} has {} values, expected cin = {}",
                    v.len(),
                    g.cin
                ));
            }
        }
        if let NormKind::Group(groups) = n.kind {
            if groups == 0 || !g.cin.is_multiple_of(groups) {
                return bad(format!(
                    "GroupNorm groups = {groups} does not divide cin = {}",
                    g.cin
                ));
            }
        }
        if !(n.eps >= 0.0 && n.eps.is_finite()) {
            return bad(format!("norm eps = {} is not a finite value >= 0", n.eps));
        }
    }
    Ok(())
}

/// `"{images} images * "` for a batch, nothing for one image (the messages' sizes).
fn images_times(images: usize) -> String {
    if images == 1 {
        String::new()
    } else {
        format!("{images} images * ")
    }
}

/// Checks every shape of a convolution: `x` against the geometry, the weight's columns
/// (`k * k * cin`) and bytes, the norm's `gamma`/`beta` and groups, and `y`
/// (`oh * ow * n_out`, `n_out` = the weight's rows).
///
/// # Errors
/// The first mismatch, naming the tensor and the dimension.
pub fn check_conv(
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    y: &[f32],
) -> Result<(), ConvError> {
    check_conv_images(x, 1, g, norm, w, y)
}

/// [`check_conv`] for `images` inputs stored one after another: `x` `[images][h * w][cin]`,
/// `y` `[images][oh * ow][n_out]`.
///
/// # Errors
/// As [`check_conv`]; also no images.
pub fn check_conv_images(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    y: &[f32],
) -> Result<(), ConvError> {
    check_input_cols(x, images, g, norm, w.cols)?;
    let Some(rb) = w.format.row_bytes(w.cols) else {
        return bad(format!(
            "weight columns = {} do not fill whole {} blocks of {}",
            w.cols,
            w.format,
            w.format.block_size()
        ));
    };
    if w.rows.checked_mul(rb) != Some(w.data.len()) {
        return bad(format!(
            "weight data has {} bytes, expected n_out * row bytes = {} * {rb}",
            w.data.len(),
            w.rows
        ));
    }
    let sb = w.row_scale_bytes();
    if w.scales.len() != w.rows * sb {
        return bad(format!(
            "weight scales have {} bytes, expected n_out * {sb}",
            w.scales.len()
        ));
    }
    check_output(images, g, w.rows, y)
}

/// The checks of [`check_conv_images`] before the weight's bytes: images, `x` and the norm
/// against the geometry, and the weight's `cols` (`k * k * cin`).
pub(super) fn check_input_cols(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    cols: usize,
) -> Result<(), ConvError> {
    if images == 0 {
        return bad("no images".to_string());
    }
    check_geom_norm(x, images, g, norm)?;
    let want = g.k * g.k * g.cin;
    if cols != want {
        return bad(format!(
            "weight has {cols} columns, expected k * k * cin = {} * {} * {} = {want}",
            g.k, g.k, g.cin
        ));
    }
    Ok(())
}

/// The last check of [`check_conv_images`]: `y` holds `images * oh * ow * rows` values.
pub(super) fn check_output(
    images: usize,
    g: &ConvGeom,
    rows: usize,
    y: &[f32],
) -> Result<(), ConvError> {
    let n_y = (g.oh * g.ow)
        .checked_mul(rows)
        .and_then(|v| v.checked_mul(images));
    if n_y != Some(y.len()) {
        return bad(format!(
            "output y has {} values, expected {}oh * ow * n_out = {} * {} * {rows}",
            y.len(),
            images_times(images),
            g.oh,
            g.ow,
        ));
    }
    Ok(())
}

/// The CPU reference of [`crate::nn::conv2d`]: [`conv_input_norm`], then the `k × k` neighbourhoods unfolded
/// (zero padding) into blocks of output pixels, each multiplied by `w` with the CPU kernels
/// (float weights packed once per call for the packed f32 GEMM,
/// `oxinfer_kernels::packed::float::pack_for_call`; otherwise `oxinfer_kernels::matmul`, whose
/// quantized formats quantize the unfolded activations to int8 blocks as every CPU matmul
/// does). A 1 × 1 convolution of stride 1 multiplies `x` directly.
///
/// # Errors
/// As [`check_conv`].
pub fn conv2d_cpu(
    x: &[f32],
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    y: &mut [f32],
) -> Result<(), ConvError> {
    conv2d_cpu_images(x, 1, g, norm, w, y)
}

/// [`conv2d_cpu`] over `images` inputs stored one after another (`x` `[images][h * w][cin]`,
/// `y` `[images][oh * ow][n_out]`): the norm's statistics are each image's own, the unfolded
/// rows of all images go through one product, so a float weight is packed once for all of them.
///
/// # Errors
/// As [`check_conv_images`].
pub fn conv2d_cpu_images(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WeightMatrix,
    y: &mut [f32],
) -> Result<(), ConvError> {
    check_conv_images(x, images, g, norm, w, y)?;
    conv2d_cpu_blocks(
        x,
        images,
        g,
        norm,
        ConvWeight::Matrix(w),
        y,
        block_rows(w.cols),
    )
}

/// [`conv2d_cpu_images`] with a weight packed once by the caller (`w`: `n_out` rows of
/// `k * k * cin` columns in the unfolded layout, as
/// [`PackedFloatMatrix::pack`] makes it from the unfolded [`WeightMatrix`]), so nothing is
/// packed per call. Results equal [`conv2d_cpu_images`]'s with the packed GEMM.
///
/// # Errors
/// As [`check_conv_images`] for `x`, the norm, `w`'s columns and `y`.
pub fn conv2d_cpu_images_packed(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &PackedFloatMatrix,
    y: &mut [f32],
) -> Result<(), ConvError> {
    check_input_cols(x, images, g, norm, w.cols())?;
    check_output(images, g, w.rows(), y)?;
    conv2d_cpu_blocks(
        x,
        images,
        g,
        norm,
        ConvWeight::Packed(w),
        y,
        block_rows(w.cols()),
    )
}

/// Unfolded rows per block for `cols` columns: about 4 Mi values (16 MiB), at least 64 rows so
/// the matmul keeps its efficiency.
fn block_rows(cols: usize) -> usize {
    ((4 << 20) / cols.max(1)).max(64)
}

/// The weight of [`conv2d_cpu_blocks`]: a matrix (packed for the call when that pays) or
/// panels packed once.
#[derive(Clone, Copy)]
enum ConvWeight<'a> {
    Matrix(&'a WeightMatrix<'a>),
    Packed(&'a PackedFloatMatrix),
}

/// [`conv2d_cpu_images`] after the shape checks, unfolding `block` output pixels (counted over
/// all images) at a time.
fn conv2d_cpu_blocks(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: ConvWeight,
    y: &mut [f32],
    block: usize,
) -> Result<(), ConvError> {
    let _prof =
        oxinfer_kernels::profile::scope(|| "conv2d unfold".to_string(), (x.len() * 4) as u64, 0);
    let xn = normalized_images(x, images, g, norm);
    let pixels = images * g.oh * g.ow;
    let (n_out, cols) = match w {
        ConvWeight::Matrix(m) => (m.rows, m.cols),
        ConvWeight::Packed(p) => (p.rows(), p.cols()),
    };
    if n_out == 0 || pixels == 0 {
        return Ok(());
    }
    // Float weights are packed once for the whole convolution (every pixel multiplies them),
    // unless the caller keeps them packed.
    let packed_here = match w {
        ConvWeight::Matrix(m) => pack_for_call(m, pixels),
        ConvWeight::Packed(_) => None,
    };
    let w = match &packed_here {
        Some(p) => ConvWeight::Packed(p),
        None => w,
    };
    let product = |x: &[f32], n: usize, y: &mut [f32]| match w {
        ConvWeight::Packed(p) => matmul_float_packed(p, x, n, y),
        ConvWeight::Matrix(m) => oxinfer_kernels::matmul(m, x, n, y),
    };
    if g.k == 1 && g.stride == 1 {
        product(&xn, pixels, y);
        return Ok(());
    }
    let block = block.clamp(1, pixels);
    let mut buf = vec![0f32; block * cols];
    let mut p0 = 0;
    while p0 < pixels {
        let n = block.min(pixels - p0);
        let cols_buf = &mut buf[..n * cols];
        unfold(&xn, g, p0, cols_buf);
        product(cols_buf, n, &mut y[p0 * n_out..(p0 + n) * n_out]);
        p0 += n;
    }
    Ok(())
}

/// Writes the unfolded rows of output pixels `p0 .. p0 + out.len() / (k²·cin)` into `out`
/// (`[n, k * k * cin]`, taps in `(ky, kx)` order, each `cin` values; zeros outside the image),
/// rows spread over the thread pool. Pixels are counted over the images of `x` one after
/// another (pixel `p` is pixel `p % (oh * ow)` of image `p / (oh * ow)`).
fn unfold(x: &[f32], g: &ConvGeom, p0: usize, out: &mut [f32]) {
    let cin = g.cin;
    let cols = g.k * g.k * cin;
    let pad = g.k / 2;
    let (out_px, in_len) = (g.oh * g.ow, g.h * g.w * cin);
    let rows_per_task = 16;
    let tasks: Vec<Mutex<&mut [f32]>> = out
        .chunks_mut(rows_per_task * cols)
        .map(Mutex::new)
        .collect();
    oxinfer_kernels::pool::parallel_for(tasks.len(), &|ti| {
        let mut chunk = tasks[ti].lock().unwrap_or_else(|e| e.into_inner());
        for (r, row) in chunk.chunks_exact_mut(cols).enumerate() {
            let p = p0 + ti * rows_per_task + r;
            let image = &x[p / out_px * in_len..(p / out_px + 1) * in_len];
            let (oy, ox) = (p % out_px / g.ow, p % g.ow);
            for ky in 0..g.k {
                let iy = (oy * g.stride + ky).wrapping_sub(pad);
                for kx in 0..g.k {
                    let ix = (ox * g.stride + kx).wrapping_sub(pad);
                    let dst = &mut row[(ky * g.k + kx) * cin..(ky * g.k + kx + 1) * cin];
                    if iy < g.h && ix < g.w {
                        let src = (iy * g.w + ix) * cin;
                        dst.copy_from_slice(&image[src..src + cin]);
                    } else {
                        dst.fill(0.0);
                    }
                }
            }
        }
    });
}

/// The convolution's input after `norm`: GroupNorm (mean and biased variance per group over all
/// pixels and the group's `cin / groups` channels) or LayerNorm (per pixel over its `cin`
/// channels), statistics accumulated in f64 in two passes; then `(x − mean) · rstd · gamma + beta`
/// in f32 with `rstd = 1 / sqrt(var + eps)`, then SiLU (`v · sigmoid(v)`) if `norm.silu`.
/// Returns `[h * w, cin]`.
///
/// # Errors
/// `x` not `[h * w, cin]`, `gamma`/`beta` not `[cin]`, groups not dividing `cin`.
pub fn conv_input_norm(x: &[f32], g: &ConvGeom, norm: &NormSpec) -> Result<Vec<f32>, ConvError> {
    check_geom_norm(x, 1, g, Some(norm))?;
    let mut out = vec![0f32; x.len()];
    norm_into(x, g, norm, &mut out);
    Ok(out)
}

/// The convolution's input for `images` images of `x` (`[images][h * w][cin]`, checked): each
/// image through `norm` with its own statistics ([`norm_into`]), or `x` itself without a norm.
pub(super) fn normalized_images<'a>(
    x: &'a [f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
) -> Cow<'a, [f32]> {
    let Some(n) = norm else {
        return Cow::Borrowed(x);
    };
    let mut out = vec![0f32; x.len()];
    let per = x.len() / images;
    for (xi, oi) in x.chunks_exact(per).zip(out.chunks_exact_mut(per)) {
        norm_into(xi, g, n, oi);
    }
    Cow::Owned(out)
}

/// [`conv_input_norm`] of one image after the checks, into `out` (`x.len()` values). The work
/// runs on the pool in parts of [`NORM_PIXELS_PER_PART`] pixels: GroupNorm sums each channel
/// down the pixels (f32 over runs of [`NORM_F32_RUN`] pixels, then f64), so the loops are
/// element-wise over contiguous channels; the parts' sums are added in order, so the result
/// does not depend on the thread count; LayerNorm sums each pixel in 8 f32 lanes
/// ([`sum_lanes`]). Then `(v − mean) · (rstd · gamma) + beta` per channel,
/// and SiLU on the part (`oxinfer_kernels::act::act_in_place`: the AVX2 `exp` under the `auto`
/// kernel set).
fn norm_into(x: &[f32], g: &ConvGeom, norm: &NormSpec, out: &mut [f32]) {
    let cin = g.cin;
    let isa = match oxinfer_kernels::kernel_set() {
        oxinfer_kernels::KernelSet::Auto => oxinfer_kernels::dispatch::detected_isa(),
        _ => oxinfer_kernels::dispatch::Isa::Scalar,
    };
    let part = NORM_PIXELS_PER_PART * cin.max(1);
    let x_parts: Vec<&[f32]> = x.chunks(part).collect();
    let mut out_parts: Vec<&mut [f32]> = out.chunks_mut(part).collect();
    // `pixel(px, o)` on every pixel of each part, then SiLU on the part.
    let apply = |out_parts: &mut [&mut [f32]], pixel: &(dyn Fn(&[f32], &mut [f32]) + Sync)| {
        oxinfer_kernels::pool::for_each_mut(out_parts, |i, o| {
            for (px, o) in x_parts[i].chunks_exact(cin).zip(o.chunks_exact_mut(cin)) {
                pixel(px, o);
            }
            if norm.silu {
                oxinfer_kernels::act::act_in_place(oxinfer_kernels::act::GateAct::Silu, o, isa);
            }
        });
    };
    match norm.kind {
        NormKind::Group(groups) => {
            let cpg = cin / groups;
            let n = (x.len() / cin * cpg) as f64;
            // Σ (v − center[c]) or Σ (v − center[c])² by group, over every pixel.
            let sums = |center: &[f32], square: bool| -> Vec<f64> {
                let mut per_part: Vec<Vec<f64>> = vec![vec![0f64; cin]; x_parts.len()];
                oxinfer_kernels::pool::for_each_mut(&mut per_part, |i, acc| {
                    let mut run = vec![0f32; cin];
                    for pixels in x_parts[i].chunks(NORM_F32_RUN * cin) {
                        run.fill(0.0);
                        for px in pixels.chunks_exact(cin) {
                            for ((r, &v), &c) in run.iter_mut().zip(px).zip(center) {
                                let d = v - c;
                                *r += if square { d * d } else { d };
                            }
                        }
                        acc.iter_mut()
                            .zip(&run)
                            .for_each(|(a, &r)| *a += f64::from(r));
                    }
                });
                let mut total = vec![0f64; groups];
                for p in &per_part {
                    for (c, v) in p.iter().enumerate() {
                        total[c / cpg] += v;
                    }
                }
                total
            };
            let mean: Vec<f64> = sums(&vec![0f32; cin], false)
                .iter()
                .map(|s| s / n)
                .collect();
            let per_channel =
                |v: &[f64]| -> Vec<f32> { (0..cin).map(|c| v[c / cpg] as f32).collect() };
            let var = sums(&per_channel(&mean), true);
            let shift = per_channel(&mean);
            let mul: Vec<f32> = (0..cin)
                .map(|c| (1.0 / (var[c / cpg] / n + norm.eps as f64).sqrt()) as f32 * norm.gamma[c])
                .collect();
            apply(&mut out_parts, &|px, o| {
                for (((o, &v), (&m, &s)), &b) in o
                    .iter_mut()
                    .zip(px)
                    .zip(shift.iter().zip(&mul))
                    .zip(norm.beta)
                {
                    *o = (v - m) * s + b;
                }
            });
        }
        NormKind::Layer => {
            apply(&mut out_parts, &|px, o| {
                let m = (sum_lanes(px, |v| v) / cin as f64) as f32;
                let var = sum_lanes(px, |v| (v - m) * (v - m)) / cin as f64;
                let r = (1.0 / (var + norm.eps as f64).sqrt()) as f32;
                for (((o, &v), &g), &b) in o.iter_mut().zip(px).zip(norm.gamma).zip(norm.beta) {
                    *o = (v - m) * r * g + b;
                }
            });
        }
    }
}

/// `Σ f(v)` over `px` in 8 f32 lanes (a loop the compiler vectorizes, as torch's f32
/// LayerNorm sums), the lanes and the tail added in f64.
fn sum_lanes(px: &[f32], f: impl Fn(f32) -> f32) -> f64 {
    let mut lanes = [0f32; 8];
    let mut chunks = px.chunks_exact(8);
    for c in &mut chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += f(v);
        }
    }
    let tail: f64 = chunks.remainder().iter().map(|&v| f64::from(f(v))).sum();
    lanes.iter().map(|&l| f64::from(l)).sum::<f64>() + tail
}

/// Pixels per pool task of [`conv_input_norm`].
const NORM_PIXELS_PER_PART: usize = 256;

/// Pixels whose GroupNorm sums are kept in f32 before they join the f64 totals.
const NORM_F32_RUN: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;
    use oxinfer_kernels::WeightFormat;

    use super::super::test_rng::Rng;

    /// Weight bytes in `f` (F32 or F16) and the values they hold.
    fn weights(f: WeightFormat, vals: &[f32]) -> (Vec<u8>, Vec<f64>) {
        match f {
            WeightFormat::F32 => (
                vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                vals.iter().map(|&v| v as f64).collect(),
            ),
            WeightFormat::F16 => {
                let h: Vec<f16> = vals.iter().map(|&v| f16::from_f32(v)).collect();
                (
                    h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    h.iter().map(|v| v.to_f64()).collect(),
                )
            }
            _ => unreachable!(),
        }
    }

    /// The normalization written out directly, in f64.
    fn naive_norm(x: &[f32], g: &ConvGeom, n: &NormSpec) -> Vec<f64> {
        let (hw, cin) = (g.h * g.w, g.cin);
        let groups = match n.kind {
            NormKind::Group(gr) => gr,
            NormKind::Layer => 1,
        };
        let cpg = cin / groups;
        let mut out = vec![0f64; x.len()];
        // Sets of (pixel, channel) sharing statistics.
        let sets: Vec<Vec<(usize, usize)>> = match n.kind {
            NormKind::Group(_) => (0..groups)
                .map(|gi| {
                    (0..hw)
                        .flat_map(|p| (gi * cpg..(gi + 1) * cpg).map(move |c| (p, c)))
                        .collect()
                })
                .collect(),
            NormKind::Layer => (0..hw)
                .map(|p| (0..cin).map(|c| (p, c)).collect())
                .collect(),
        };
        for set in sets {
            let val = |&(p, c): &(usize, usize)| x[p * cin + c] as f64;
            let m = set.iter().map(val).sum::<f64>() / set.len() as f64;
            let var = set.iter().map(|e| (val(e) - m).powi(2)).sum::<f64>() / set.len() as f64;
            for e @ &(p, c) in &set {
                let mut v = (val(e) - m) / (var + n.eps as f64).sqrt() * n.gamma[c] as f64
                    + n.beta[c] as f64;
                if n.silu {
                    v /= 1.0 + (-v).exp();
                }
                out[p * cin + c] = v;
            }
        }
        out
    }

    /// The convolution as six loops in f64 (`wv` `[n_out][ky][kx][cin]`).
    fn naive_conv(x: &[f64], g: &ConvGeom, wv: &[f64], n_out: usize) -> Vec<f64> {
        let pad = g.k / 2;
        let mut y = vec![0f64; g.oh * g.ow * n_out];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                for o in 0..n_out {
                    let mut s = 0f64;
                    for ky in 0..g.k {
                        for kx in 0..g.k {
                            let iy = (oy * g.stride + ky) as isize - pad as isize;
                            let ix = (ox * g.stride + kx) as isize - pad as isize;
                            if iy < 0 || ix < 0 || iy >= g.h as isize || ix >= g.w as isize {
                                continue;
                            }
                            for c in 0..g.cin {
                                let xv = x[(iy as usize * g.w + ix as usize) * g.cin + c];
                                s += xv * wv[((o * g.k + ky) * g.k + kx) * g.cin + c];
                            }
                        }
                    }
                    y[(oy * g.ow + ox) * n_out + o] = s;
                }
            }
        }
        y
    }

    fn rel_err(a: &[f32], b: &[f64]) -> f64 {
        let md = a.iter().zip(b).map(|(&a, &b)| (a as f64 - b).abs());
        let mr = b.iter().fold(0f64, |m, v| m.max(v.abs()));
        md.fold(0f64, f64::max) / mr.max(1e-30)
    }

    #[test]
    fn matches_direct_convolution() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        // (h, w, cin, n_out, k, stride)
        let shapes = [
            (5, 7, 3, 4, 3, 1),
            (8, 8, 8, 16, 3, 2),
            (6, 5, 12, 7, 1, 1),
            (9, 4, 16, 5, 1, 2),
            (7, 7, 40, 9, 3, 1),
            (11, 6, 4, 3, 5, 2),
            (1, 1, 6, 2, 3, 1),
            (3, 2, 8, 3, 3, 2),
        ];
        let kinds = [
            None,
            Some((NormKind::Layer, false)),
            Some((NormKind::Layer, true)),
            Some((NormKind::Group(2), false)),
            Some((NormKind::Group(1), true)),
            Some((NormKind::Group(4), true)),
        ];
        for &(h, w, cin, n_out, k, stride) in &shapes {
            let g = conv_geom(h, w, cin, k, stride).unwrap();
            // An offset so that the norm's mean matters.
            let x = rng.vec(h * w * cin, 2.0, 0.7);
            let gamma = rng.vec(cin, 0.5, 1.0);
            let beta = rng.vec(cin, 0.3, 0.0);
            let wvals = rng.vec(n_out * k * k * cin, 0.5, 0.0);
            for kind in kinds {
                if let Some((NormKind::Group(gr), _)) = kind {
                    if cin % gr != 0 {
                        continue;
                    }
                }
                let norm = kind.map(|(kind, silu)| NormSpec {
                    kind,
                    eps: 1e-5,
                    gamma: &gamma,
                    beta: &beta,
                    silu,
                });
                let xn = match &norm {
                    Some(n) => naive_norm(&x, &g, n),
                    None => x.iter().map(|&v| v as f64).collect(),
                };
                for f in [WeightFormat::F32, WeightFormat::F16] {
                    let (bytes, wv) = weights(f, &wvals);
                    let wm = WeightMatrix::new(f, &bytes, n_out, k * k * cin).unwrap();
                    let want = naive_conv(&xn, &g, &wv, n_out);
                    // Whole blocks, and blocks of 3 pixels (a ragged last block).
                    for block in [usize::MAX, 3] {
                        let mut y = vec![f32::NAN; g.oh * g.ow * n_out];
                        conv2d_cpu_blocks(
                            &x,
                            1,
                            &g,
                            norm.as_ref(),
                            ConvWeight::Matrix(&wm),
                            &mut y,
                            block,
                        )
                        .unwrap();
                        let e = rel_err(&y, &want);
                        assert!(
                            e < 1e-5,
                            "{h}x{w}x{cin} -> {n_out} k{k} s{stride} {kind:?} {f} block {block}: \
                             rel err {e:.2e}"
                        );
                    }
                    let mut y = vec![f32::NAN; g.oh * g.ow * n_out];
                    conv2d_cpu(&x, &g, norm.as_ref(), &wm, &mut y).unwrap();
                    assert!(rel_err(&y, &want) < 1e-5);
                }
            }
        }
    }

    #[test]
    fn images_match_one_image_at_a_time() {
        let mut rng = Rng(0x0bad_cafe);
        // (h, w, cin, n_out, k, stride): 3 × 3, strided, and 1 × 1 (one product over x).
        for &(h, w, cin, n_out, k, stride) in
            &[(5, 6, 8, 7, 3, 1), (7, 5, 8, 5, 3, 2), (4, 4, 8, 6, 1, 1)]
        {
            let g = conv_geom(h, w, cin, k, stride).unwrap();
            let x = rng.vec(3 * h * w * cin, 2.0, 0.5);
            let gamma = rng.vec(cin, 0.5, 1.0);
            let beta = rng.vec(cin, 0.3, 0.0);
            let norm = NormSpec {
                kind: NormKind::Group(2),
                eps: 1e-5,
                gamma: &gamma,
                beta: &beta,
                silu: true,
            };
            let (bytes, _) = weights(WeightFormat::F32, &rng.vec(n_out * k * k * cin, 0.5, 0.0));
            let wm = WeightMatrix::new(WeightFormat::F32, &bytes, n_out, k * k * cin).unwrap();
            let per_out = g.oh * g.ow * n_out;
            let mut want = vec![0f32; 3 * per_out];
            for (xi, yi) in x
                .chunks_exact(h * w * cin)
                .zip(want.chunks_exact_mut(per_out))
            {
                conv2d_cpu(xi, &g, Some(&norm), &wm, yi).unwrap();
            }
            // Whole blocks, and blocks of 7 pixels that straddle the images.
            for block in [usize::MAX, 7] {
                let mut y = vec![f32::NAN; 3 * per_out];
                conv2d_cpu_blocks(
                    &x,
                    3,
                    &g,
                    Some(&norm),
                    ConvWeight::Matrix(&wm),
                    &mut y,
                    block,
                )
                .unwrap();
                let e = rel_err(&y, &want.iter().map(|&v| v as f64).collect::<Vec<_>>());
                assert!(
                    e < 1e-5,
                    "{h}x{w} k{k} s{stride} block {block}: rel err {e:.2e}"
                );
            }
            let mut y = vec![0f32; 3 * per_out];
            let e = conv2d_cpu_images(&x[1..], 3, &g, None, &wm, &mut y)
                .unwrap_err()
                .0;
            assert!(e.contains("3 images"), "{e}");
        }
    }

    #[test]
    fn stored_packed_weight_matches_per_call_packing() {
        use oxinfer_kernels::packed::float::{float_packing_pays, PACK_FOR_CALL_MIN_ROWS};
        let mut rng = Rng(0x5eed);
        // (h, w, cin, n_out, k, stride): 3 × 3 with a ragged last panel, strided, 1 × 1.
        for &(h, w, cin, n_out, k, stride) in &[
            (9, 8, 8, 20, 3, 1),
            (11, 9, 16, 32, 3, 2),
            (8, 8, 24, 17, 1, 1),
        ] {
            let g = conv_geom(h, w, cin, k, stride).unwrap();
            let images = 2;
            let x = rng.vec(images * h * w * cin, 2.0, 0.5);
            let (bytes, _) = weights(WeightFormat::F32, &rng.vec(n_out * k * k * cin, 0.5, 0.0));
            let wm = WeightMatrix::new(WeightFormat::F32, &bytes, n_out, k * k * cin).unwrap();
            let packed = PackedFloatMatrix::pack(&wm).unwrap();
            let n_y = images * g.oh * g.ow * n_out;
            let (mut want, mut y) = (vec![0f32; n_y], vec![f32::NAN; n_y]);
            conv2d_cpu_images(&x, images, &g, None, &wm, &mut want).unwrap();
            conv2d_cpu_images_packed(&x, images, &g, None, &packed, &mut y).unwrap();
            if float_packing_pays(WeightFormat::F32)
                && images * g.oh * g.ow >= PACK_FOR_CALL_MIN_ROWS
            {
                // The same panels through the same GEMM: bit for bit.
                assert_eq!(y, want, "{h}x{w} k{k} s{stride}");
            } else {
                let e = rel_err(&y, &want.iter().map(|&v| v as f64).collect::<Vec<_>>());
                assert!(e < 1e-5, "{h}x{w} k{k} s{stride}: rel err {e:.2e}");
            }
            let e = conv2d_cpu_images_packed(&x, images, &g, None, &packed, &mut y[1..])
                .unwrap_err()
                .0;
            assert!(e.contains("output y"), "{e}");
        }
    }

    #[test]
    fn input_norm_matches_direct_formula() {
        let mut rng = Rng(77);
        let g = conv_geom(64, 64, 40, 3, 1).unwrap();
        // A large mean against a small spread: what a one-pass f32 variance gets wrong.
        let x = rng.vec(64 * 64 * 40, 0.01, 100.0);
        let gamma = rng.vec(40, 0.5, 1.0);
        let beta = rng.vec(40, 0.3, 0.0);
        for kind in [NormKind::Group(1), NormKind::Group(8), NormKind::Layer] {
            let n = NormSpec {
                kind,
                eps: 1e-6,
                gamma: &gamma,
                beta: &beta,
                silu: true,
            };
            let got = conv_input_norm(&x, &g, &n).unwrap();
            let e = rel_err(&got, &naive_norm(&x, &g, &n));
            // The mean is rounded to f32 (ulp(100) / 2 = 3.8e-6 against a spread of 6e-3)
            // before `x − mean`: 1e-4-level error. A one-pass f32 variance would be O(1) off.
            assert!(e < 1e-3, "{kind:?}: rel err {e:.2e}");
        }
    }

    #[test]
    fn quantized_weights_take_the_quantized_matmul() {
        // Q8 (32-weight blocks, split scales): the CPU matmul quantizes the unfolded activations
        // to int8, so the result is close to, not equal to, the f32 product.
        let mut rng = Rng(5);
        let g = conv_geom(6, 6, 32, 3, 1).unwrap();
        let (n_out, cols) = (8, 9 * 32);
        let x = rng.vec(6 * 6 * 32, 1.0, 0.0);
        let wvals = rng.vec(n_out * cols, 0.5, 0.0);
        let (f32_bytes, _) = weights(WeightFormat::F32, &wvals);
        let wf = WeightMatrix::new(WeightFormat::F32, &f32_bytes, n_out, cols).unwrap();
        let q = oxinfer_kernels::quantize::quantize_matrix(&wf, WeightFormat::Q8).unwrap();
        let wm = q.matrix(n_out, cols).unwrap();
        let mut deq = vec![0f32; cols];
        let mut wv = Vec::new();
        for r in 0..n_out {
            wm.dequantize_row_into(r, &mut deq);
            wv.extend(deq.iter().map(|&v| v as f64));
        }
        let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let want = naive_conv(&xd, &g, &wv, n_out);
        let mut y = vec![0f32; 36 * n_out];
        conv2d_cpu(&x, &g, None, &wm, &mut y).unwrap();
        let e = rel_err(&y, &want);
        assert!(e < 2e-2, "rel err {e:.2e}");
    }

    #[test]
    fn shape_errors_name_the_dimension() {
        let g = conv_geom(4, 4, 8, 3, 1).unwrap();
        let x = vec![0f32; 4 * 4 * 8];
        let bytes = vec![0u8; 5 * 72 * 4];
        let w = WeightMatrix::new(WeightFormat::F32, &bytes, 5, 72).unwrap();
        let ones = vec![1f32; 8];
        let mut y = vec![0f32; 16 * 5];
        let err = |x: &[f32], g: &ConvGeom, n: Option<&NormSpec>, w: &WeightMatrix, y: &[f32]| {
            let e = check_conv(x, g, n, w, y).unwrap_err().0;
            let mut y2 = y.to_vec();
            assert_eq!(conv2d_cpu(x, g, n, w, &mut y2).unwrap_err().0, e);
            e
        };
        assert!(err(&x[1..], &g, None, &w, &y).contains("input x"));
        let w_bad = WeightMatrix { cols: 71, ..w };
        assert!(err(&x, &g, None, &w_bad, &y).contains("columns"));
        let g_bad = ConvGeom { oh: 3, ..g };
        assert!(err(&x, &g_bad, None, &w, &y).contains("oh x ow"));
        let g_s2 = ConvGeom { stride: 2, ..g };
        assert!(err(&x, &g_s2, None, &w, &y).contains("expected 2x2"));
        assert!(err(&x, &g, None, &w, &y[1..]).contains("output y"));
        let n = |kind, gamma, beta| NormSpec {
            kind,
            eps: 1e-5,
            gamma,
            beta,
            silu: false,
        };
        let e = err(&x, &g, Some(&n(NormKind::Layer, &ones[1..], &ones)), &w, &y);
        assert!(e.contains("gamma"), "{e}");
        let e = err(&x, &g, Some(&n(NormKind::Layer, &ones, &ones[..3])), &w, &y);
        assert!(e.contains("beta"), "{e}");
        for groups in [0, 3] {
            let e = err(
                &x,
                &g,
                Some(&n(NormKind::Group(groups), &ones, &ones)),
                &w,
                &y,
            );
            assert!(e.contains("groups"), "{e}");
        }
        assert!(conv_geom(4, 4, 8, 3, 0).is_err());
        assert!(conv_geom(4, 4, 8, 0, 1).is_err());
        assert!(conv_geom(4, 4, 0, 3, 1).is_err());
        assert!(conv_input_norm(&x[1..], &g, &n(NormKind::Layer, &ones, &ones)).is_err());
        // A consistent call works.
        conv2d_cpu(&x, &g, None, &w, &mut y).unwrap();
    }

    #[test]
    fn output_size_formula() {
        assert_eq!(conv_out_size(64, 3, 1), Some(64));
        assert_eq!(conv_out_size(64, 3, 2), Some(32));
        assert_eq!(conv_out_size(13, 3, 2), Some(7));
        assert_eq!(conv_out_size(7, 1, 2), Some(4));
        assert_eq!(conv_out_size(1, 3, 1), Some(1));
        assert_eq!(conv_out_size(0, 3, 1), None);
    }
}
