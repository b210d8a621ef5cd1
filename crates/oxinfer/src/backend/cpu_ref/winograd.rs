//! Winograd F(4×4, 3×3) for the stride-1 `3 × 3` convolutions of [`super::conv`]: the same
//! result (to rounding) with 36 products per 16 outputs and channel pair instead of 144.
//!
//! The output is cut into tiles of 4 × 4 pixels; tile `(ty, tx)` reads the 6 × 6 input pixels
//! from `(4·ty − 1, 4·tx − 1)` (zeros outside the image, so the padding of 1 on every side and
//! the partial tiles at the right and bottom edges come out of the same gather). With the
//! Lavin–Gray matrices of the points `0, 1, −1, 2, −2, ∞` ([`BT`], [`G`], [`AT`]):
//!
//! - the weight `g` `3 × 3` of each (output, input) channel pair becomes `U = G g Gᵀ` (6 × 6),
//!   once at load ([`WinogradWeight`]);
//! - each input tile `d` (6 × 6, per channel) becomes `V = Bᵀ d B`;
//! - at each of the 36 positions `ξ`, `M_ξ[tiles × cout] = V_ξ[tiles × cin] · U_ξᵀ` is one
//!   packed f32 GEMM ([`matmul_float_packed`]): the channel sum of the element-wise products;
//! - each output tile is `Aᵀ M A` (4 × 4), of which only the pixels inside the output are
//!   written.
//!
//! Layouts are channels-last like [`super::conv`]: `x` `[images][h · w][cin]`, `y`
//! `[images][h · w][cout]`. The transformed tiles live in `[36][tiles][cin]` and
//! `[36][tiles][cout]` buffers for a block of whole tile rows at a time (about 16 MiB, like the
//! direct convolution's unfolded block), reused within a call; the transforms run over runs of
//! [`LANES`] (16 below that many) consecutive channels (vectorizable loops), one pool task per
//! tile row; the 36 products run as tasks of one pool region, each on one thread.
//!
//! Error: the transforms multiply values by up to 5 (input) and 8 (output) and sum up to 36
//! terms more than the direct product does, so results differ from the direct convolution by a
//! few 1e-6 to 1e-5 relative to the output's largest value (at most 8e-6 in the tests, 1.6e-5
//! at SD shapes in `examples/conv_winograd.rs`) rather than the 1e-7 of a reordered f32 sum.

use super::conv::{check_input_cols, check_output, normalized_images, ConvError};
use crate::backend::{ConvGeom, NormSpec};
use oxinfer_kernels::packed::float::{matmul_float_packed, PackedFloatMatrix, NR};
use oxinfer_kernels::pool::pool_threads;
use oxinfer_kernels::WeightMatrix;

/// Output pixels per tile side.
const TILE_OUT: usize = 4;
/// Input pixels per tile side (`TILE_OUT + 3 − 1`).
const TILE_IN: usize = 6;
/// Transform positions per tile (`TILE_IN²`).
const POSITIONS: usize = TILE_IN * TILE_IN;

/// The fewest tiles of one product task (a few register tiles of the GEMM).
const MIN_TASK_TILES: usize = 48;

/// Channels one pass of the tile transforms covers where there are at least this many: long
/// enough runs that the per-run work (gather bounds, loop set-up) is small against the
/// arithmetic (measured: 64 channels per run made the transforms ~35 % faster than 16).
pub const LANES: usize = 64;

/// Channels per pass of the tile transforms below [`LANES`] channels.
const FEW_LANES: usize = 16;

/// `Bᵀ` of F(4, 3), the input transform (rows: positions, columns: input pixels).
pub const BT: [[f64; 6]; 6] = [
    [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
    [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
    [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
    [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
];

/// `G` of F(4, 3), the kernel transform (rows: positions, columns: the 3 taps).
pub const G: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];

/// `Aᵀ` of F(4, 3), the output transform (rows: the 4 outputs, columns: positions).
pub const AT: [[f64; 6]; 4] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
];

/// A `3 × 3` convolution weight in the Winograd domain: for each of the 36 positions `ξ` of
/// `U = G g Gᵀ`, the `[cout, cin]` matrix `U_ξ[o][c]` packed for the f32 GEMM. Holds
/// `36 · ceil(cout / 16) · 16 · cin` f32 values: four times the f32 kernel (36 values per
/// channel pair instead of 9).
#[derive(Clone, Debug)]
pub struct WinogradWeight {
    u: Vec<PackedFloatMatrix>,
    cin: usize,
    cout: usize,
}

impl WinogradWeight {
    /// Transforms `w`, a `3 × 3` kernel in the unfolded layout `[cout][ky][kx][cin]` (a
    /// [`WeightMatrix`] of `cout` rows and `9 · cin` columns, in any format the CPU kernels
    /// dequantize), to `U = G g Gᵀ` per channel pair ([`Self::from_stored`] says how).
    ///
    /// # Errors
    /// `cin` is 0 or `w` does not have `9 · cin` columns.
    pub fn new(w: &WeightMatrix, cin: usize) -> Result<Self, ConvError> {
        if cin == 0 || w.cols != 9 * cin {
            return Err(ConvError(format!(
                "Winograd weight has {} columns, expected 3 * 3 * cin = 9 * {cin} (cin > 0)",
                w.cols
            )));
        }
        Ok(Self::transform(w.rows, cin, |p, live| {
            // The panel's rows, dequantized: tap `t` of channel `c` of row `r` at
            // `[r][t · cin + c]`.
            let mut rows = vec![0f32; live * 9 * cin];
            for (r, row) in rows.chunks_exact_mut(9 * cin).enumerate() {
                w.dequantize_row_into(p * NR + r, row);
            }
            move |r, c| std::array::from_fn(|tap| rows[r * 9 * cin + tap * cin + c])
        }))
    }

    /// Transforms a `3 × 3` f32 kernel as a file stores it: `src` is `[cout][cin][3][3]`
    /// little-endian f32 (any alignment), read in place: no unfolded copy is made. The result
    /// is bit for bit [`Self::new`]'s of the same kernel unfolded.
    ///
    /// Both compute `U = G g Gᵀ` separably (`T = G g`, then `U = T Gᵀ`: 162 multiply-adds per
    /// channel pair instead of 324) in f32, about 1e-7 relative to the exact transform (far
    /// below F(4, 3)'s own rounding), one panel of 16 output channels per pool task with the
    /// panel's rows as the vector lanes, each result written straight into its place in the
    /// 36 packed matrices.
    ///
    /// # Errors
    /// `cin` is 0 or `src` is not `cout · cin · 9` f32 values.
    pub fn from_stored(src: &[u8], cout: usize, cin: usize) -> Result<Self, ConvError> {
        if cin == 0 || src.len() != cout * cin * 9 * 4 {
            return Err(ConvError(format!(
                "Winograd kernel of {} bytes, expected {cout} * {cin} * 3 * 3 f32 (cin > 0)",
                src.len()
            )));
        }
        Ok(Self::transform(cout, cin, |p, _| {
            move |r, c| {
                let s = ((p * NR + r) * cin + c) * 36;
                let taps: &[u8; 36] = src[s..s + 36].try_into().expect("36 bytes");
                std::array::from_fn(|t| {
                    f32::from_le_bytes([
                        taps[4 * t],
                        taps[4 * t + 1],
                        taps[4 * t + 2],
                        taps[4 * t + 3],
                    ])
                })
            }
        }))
    }

    /// The transform of [`Self::from_stored`] over a `cout × cin` kernel: `panel(p, live)`
    /// gives, for panel `p` (output channels `16p ..`, `live` of them), the reader of the 9
    /// taps of channel pair (`16p + r`, `c`) as `read(r, c)`.
    fn transform<P, R>(cout: usize, cin: usize, panel: P) -> Self
    where
        P: Fn(usize, usize) -> R + Sync,
        R: Fn(usize, usize) -> [f32; 9],
    {
        let gf = G.map(|row| row.map(|v| v as f32));
        // One mapping for the 36 matrices: on huge pages even where each is smaller than one
        // (every SD 1.5 layer below 1920 x 640 channels), a fraction of the page faults.
        let mut u = PackedFloatMatrix::zeroed_many(POSITIONS, cout, cin);
        // Panel p of each of the 36 matrices, gathered per panel: one task's outputs.
        let mut panels: Vec<Vec<&mut [f32]>> = (0..cout.div_ceil(NR))
            .map(|_| Vec::with_capacity(POSITIONS))
            .collect();
        for m in &mut u {
            for (p, part) in m.panels_mut().enumerate() {
                panels[p].push(part);
            }
        }
        oxinfer_kernels::pool::for_each_mut(&mut panels, |p, out| {
            let live = NR.min(cout - p * NR);
            let read = panel(p, live);
            for c in 0..cin {
                // g[tap][r]: the 9 taps of channel pair (16p + r, c), zero past `live` rows
                // (whose transform stays +0, the padding the matrices must keep).
                let mut g = [[0f32; NR]; 9];
                for r in 0..live {
                    for (gt, v) in g.iter_mut().zip(read(r, c)) {
                        gt[r] = v;
                    }
                }
                // t[i][b] = Σ_a G[i][a] g[a][b].
                let mut t = [[0f32; NR]; 18];
                for (ib, ti) in t.iter_mut().enumerate() {
                    let (i, b) = (ib / 3, ib % 3);
                    for (a, &cf) in gf[i].iter().enumerate() {
                        if cf != 0.0 {
                            ti.iter_mut()
                                .zip(&g[a * 3 + b])
                                .for_each(|(d, &v)| *d += cf * v);
                        }
                    }
                }
                // U[i][j] = Σ_b t[i][b] G[j][b], into group c of matrix (i, j)'s panel.
                for (xi, part) in out.iter_mut().enumerate() {
                    let (i, j) = (xi / TILE_IN, xi % TILE_IN);
                    let mut uv = [0f32; NR];
                    for (b, &cf) in gf[j].iter().enumerate() {
                        if cf != 0.0 {
                            uv.iter_mut()
                                .zip(&t[i * 3 + b])
                                .for_each(|(d, &v)| *d += cf * v);
                        }
                    }
                    part[c * NR..(c + 1) * NR].copy_from_slice(&uv);
                }
            }
        });
        WinogradWeight { u, cin, cout }
    }

    /// Input channels.
    pub fn cin(&self) -> usize {
        self.cin
    }

    /// Output channels.
    pub fn cout(&self) -> usize {
        self.cout
    }

    /// Bytes held (the 36 packed matrices).
    pub fn size_bytes(&self) -> usize {
        self.u.iter().map(PackedFloatMatrix::size_bytes).sum()
    }
}

/// The `3 × 3`, stride-1 convolution of [`super::conv::conv2d_cpu_images_packed`] (padding 1,
/// `oh = h`, `ow = w`; the optional `norm` with its SiLU applied to each image's input before
/// the zero padding) by Winograd F(4×4, 3×3) with the transformed weight `w`: `x`
/// `[images][h · w][cin]`, `y` `[images][h · w][cout]`. The bias is the caller's to add.
/// Results equal the direct convolution's to a few 1e-6 of the output's scale (see the module
/// doc).
///
/// # Errors
/// A geometry other than `k = 3`, stride 1; the shape errors of
/// [`super::conv::conv2d_cpu_images_packed`] for `x`, the norm, `w`'s `cin` and `y`.
pub fn conv2d_winograd_images(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WinogradWeight,
    y: &mut [f32],
) -> Result<(), ConvError> {
    if g.k != 3 || g.stride != 1 {
        return Err(ConvError(format!(
            "Winograd F(4x4, 3x3) takes kernel size 3 and stride 1, got kernel size {} and \
             stride {}",
            g.k, g.stride
        )));
    }
    check_input_cols(x, images, g, norm, 9 * w.cin)?;
    check_output(images, g, w.cout, y)?;
    let tw = g.w.div_ceil(TILE_OUT);
    winograd_blocks(x, images, g, norm, w, y, block_tile_rows(tw, w.cin, w.cout))
}

/// Tile rows per block for `tw` tiles per row: the transformed input and output
/// (`36 · tiles · (cin + cout)` floats) within about 4 Mi values (16 MiB), at least one row.
fn block_tile_rows(tw: usize, cin: usize, cout: usize) -> usize {
    ((4 << 20) / (POSITIONS * tw * (cin + cout)).max(1)).max(1)
}

/// [`conv2d_winograd_images`] after the checks, `block` tile rows (counted over all images) at
/// a time.
fn winograd_blocks(
    x: &[f32],
    images: usize,
    g: &ConvGeom,
    norm: Option<&NormSpec>,
    w: &WinogradWeight,
    y: &mut [f32],
    block: usize,
) -> Result<(), ConvError> {
    let _prof =
        oxinfer_kernels::profile::scope(|| "conv2d winograd".to_string(), (x.len() * 4) as u64, 0);
    let (cin, cout) = (w.cin, w.cout);
    if cout == 0 {
        return Ok(());
    }
    let xn = normalized_images(x, images, g, norm);
    let (th, tw) = (g.h.div_ceil(TILE_OUT), g.w.div_ceil(TILE_OUT));
    let tile_rows = images * th;
    let block = block.clamp(1, tile_rows);
    let mut v = vec![0f32; POSITIONS * block * tw * cin];
    let mut m = vec![0f32; POSITIONS * block * tw * cout];
    // Output values of one pixel row of y.
    let row_len = g.w * cout;
    let mut r0 = 0;
    while r0 < tile_rows {
        let nr = block.min(tile_rows - r0);
        let n = nr * tw;
        let (vb, mb) = (
            &mut v[..POSITIONS * n * cin],
            &mut m[..POSITIONS * n * cout],
        );
        // V_ξ of tile row r is vb[ξ][r·tw .. (r + 1)·tw][cin]: 36 parts per task.
        let mut parts: Vec<Vec<&mut [f32]>> = (0..nr).map(|_| Vec::with_capacity(36)).collect();
        for vx in vb.chunks_exact_mut(n * cin) {
            for (r, part) in vx.chunks_exact_mut(tw * cin).enumerate() {
                parts[r].push(part);
            }
        }
        oxinfer_kernels::pool::for_each_mut(&mut parts, |r, p| {
            if cin >= LANES {
                input_tile_row::<LANES>(&xn, g, r0 + r, p);
            } else {
                input_tile_row::<FEW_LANES>(&xn, g, r0 + r, p);
            }
        });
        // The 36 products (each split in runs of tiles where there are few positions per
        // thread) as tasks of one pool region, each product on one thread: no barrier per
        // product, and a thread keeps its U_ξ in its own cache.
        let splits = (4 * pool_threads())
            .div_ceil(POSITIONS)
            .clamp(1, n.div_ceil(MIN_TASK_TILES));
        let per = n.div_ceil(splits);
        let mut jobs: Vec<(usize, &[f32], &mut [f32])> = Vec::with_capacity(POSITIONS * splits);
        for (xi, (vx, mx)) in vb
            .chunks_exact(n * cin)
            .zip(mb.chunks_exact_mut(n * cout))
            .enumerate()
        {
            for (vs, ms) in vx.chunks(per * cin).zip(mx.chunks_mut(per * cout)) {
                jobs.push((xi, vs, ms));
            }
        }
        oxinfer_kernels::pool::for_each_mut(&mut jobs, |_, (xi, vs, ms)| {
            matmul_float_packed(&w.u[*xi], vs, vs.len() / cin, ms);
        });
        // Tile row R = image · th + ty writes output rows 4·ty .. min(4·ty + 4, h) of its image:
        // consecutive tile rows own consecutive runs of y.
        let out_rows = |r: usize| TILE_OUT.min(g.h - r % th * TILE_OUT);
        let start = (r0 / th * g.h + r0 % th * TILE_OUT) * row_len;
        let len: usize = (r0..r0 + nr).map(|r| out_rows(r) * row_len).sum();
        let mut rest = &mut y[start..start + len];
        let mut outs: Vec<&mut [f32]> = Vec::with_capacity(nr);
        for r in r0..r0 + nr {
            let (a, b) = rest.split_at_mut(out_rows(r) * row_len);
            outs.push(a);
            rest = b;
        }
        let mb = &*mb;
        oxinfer_kernels::pool::for_each_mut(&mut outs, |r, out| {
            if cout >= LANES {
                output_tile_row::<LANES>(mb, n, r * tw, tw, g.w, cout, out);
            } else {
                output_tile_row::<FEW_LANES>(mb, n, r * tw, tw, g.w, cout, out);
            }
        });
        r0 += nr;
    }
    Ok(())
}

/// The input transform of tile row `row` (counted over the images of `x`): for each of its
/// `tw` tiles and each run of `L` channels, the 6 × 6 pixels gathered (zeros outside the
/// image), `Bᵀ d B`, and position `ξ` written to `parts[ξ][tx · cin ..][.. cin]`.
fn input_tile_row<const L: usize>(x: &[f32], g: &ConvGeom, row: usize, parts: &mut [&mut [f32]]) {
    let (cin, th) = (g.cin, g.h.div_ceil(TILE_OUT));
    let image = &x[row / th * g.h * g.w * cin..(row / th + 1) * g.h * g.w * cin];
    let y0 = (row % th * TILE_OUT) as isize - 1;
    let tw = g.w.div_ceil(TILE_OUT);
    for tx in 0..tw {
        let x0 = (tx * TILE_OUT) as isize - 1;
        for c0 in (0..cin).step_by(L) {
            let lanes = L.min(cin - c0);
            let mut d = [[[0f32; L]; TILE_IN]; TILE_IN];
            for (i, drow) in d.iter_mut().enumerate() {
                let iy = y0 + i as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                for (j, dv) in drow.iter_mut().enumerate() {
                    let ix = x0 + j as isize;
                    if ix < 0 || ix >= g.w as isize {
                        continue;
                    }
                    let src = (iy as usize * g.w + ix as usize) * cin + c0;
                    dv[..lanes].copy_from_slice(&image[src..src + lanes]);
                }
            }
            // Bᵀ d over the rows (t[j] is column j of Bᵀ d), then (Bᵀ d) B over the columns.
            let mut t = [[[0f32; L]; TILE_IN]; TILE_IN];
            for (j, tj) in t.iter_mut().enumerate() {
                bt6(std::array::from_fn(|i| &d[i][j]), tj);
            }
            let mut v = [[0f32; L]; TILE_IN];
            let dst = tx * cin + c0;
            for i in 0..TILE_IN {
                bt6(std::array::from_fn(|j| &t[j][i]), &mut v);
                for (j, vj) in v.iter().enumerate() {
                    parts[i * TILE_IN + j][dst..dst + lanes].copy_from_slice(&vj[..lanes]);
                }
            }
        }
    }
}

/// The output transform of the `tw` tiles from tile `t0` of the block (`m` `[36][n][cout]`):
/// `Aᵀ M A` per run of `L` channels, the pixels inside the output written to `out`
/// (the tile row's output rows, at most 4: `[rows][width][cout]`).
fn output_tile_row<const L: usize>(
    m: &[f32],
    n: usize,
    t0: usize,
    tw: usize,
    width: usize,
    cout: usize,
    out: &mut [f32],
) {
    for tx in 0..tw {
        let cols = TILE_OUT.min(width - tx * TILE_OUT);
        for c0 in (0..cout).step_by(L) {
            let lanes = L.min(cout - c0);
            let mut s = [[[0f32; L]; TILE_IN]; TILE_IN];
            for (xi, sv) in s.iter_mut().flatten().enumerate() {
                let src = (xi * n + t0 + tx) * cout + c0;
                sv[..lanes].copy_from_slice(&m[src..src + lanes]);
            }
            // Aᵀ M over the rows (t[j] is column j of Aᵀ M), then (Aᵀ M) A over the columns.
            let mut t = [[[0f32; L]; TILE_OUT]; TILE_IN];
            for (j, tj) in t.iter_mut().enumerate() {
                at6(std::array::from_fn(|i| &s[i][j]), tj);
            }
            let mut o = [[0f32; L]; TILE_OUT];
            for (i, out_row) in out.chunks_exact_mut(width * cout).enumerate() {
                at6(std::array::from_fn(|j| &t[j][i]), &mut o);
                for (j, oj) in o.iter().enumerate().take(cols) {
                    let dst = (tx * TILE_OUT + j) * cout + c0;
                    out_row[dst..dst + lanes].copy_from_slice(&oj[..lanes]);
                }
            }
        }
    }
}

/// `o = Bᵀ d` for one column of 6 pixels, each `L` channels ([`BT`] written out).
#[inline(always)]
fn bt6<const L: usize>(d: [&[f32; L]; 6], o: &mut [[f32; L]; 6]) {
    let [d0, d1, d2, d3, d4, d5] = d;
    let [o0, o1, o2, o3, o4, o5] = o;
    for l in 0..L {
        o0[l] = 4.0 * d0[l] - 5.0 * d2[l] + d4[l];
        o1[l] = (d3[l] + d4[l]) - 4.0 * (d1[l] + d2[l]);
        o2[l] = (d4[l] - d3[l]) + 4.0 * (d1[l] - d2[l]);
        o3[l] = (d4[l] - d2[l]) + 2.0 * (d3[l] - d1[l]);
        o4[l] = (d4[l] - d2[l]) - 2.0 * (d3[l] - d1[l]);
        o5[l] = 4.0 * d1[l] - 5.0 * d3[l] + d5[l];
    }
}

/// `o = Aᵀ m` for one column of 6 positions, each `L` channels ([`AT`] written out).
#[inline(always)]
fn at6<const L: usize>(m: [&[f32; L]; 6], o: &mut [[f32; L]; 4]) {
    let [m0, m1, m2, m3, m4, m5] = m;
    let [o0, o1, o2, o3] = o;
    for l in 0..L {
        let (a, b, c, d) = (m1[l] + m2[l], m1[l] - m2[l], m3[l] + m4[l], m3[l] - m4[l]);
        o0[l] = m0[l] + a + c;
        o1[l] = b + 2.0 * d;
        o2[l] = a + 4.0 * c;
        o3[l] = b + 8.0 * d + m5[l];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu_ref::conv::{conv2d_cpu_images, conv_geom};
    use crate::backend::NormKind;
    use oxinfer_kernels::WeightFormat;

    use super::super::test_rng::Rng;

    #[test]
    fn one_dimensional_f43_is_exact_correlation() {
        // y_i = Σ_k d_{i+k} g_k for i < 4, from Aᵀ[(G g) ⊙ (Bᵀ d)] in f64.
        let mut rng = Rng(42);
        for _ in 0..100 {
            let d: Vec<f64> = (0..6).map(|_| f64::from(rng.f())).collect();
            let gk: Vec<f64> = (0..3).map(|_| f64::from(rng.f())).collect();
            let u: Vec<f64> = G
                .iter()
                .map(|r| r.iter().zip(&gk).map(|(a, b)| a * b).sum())
                .collect();
            let v: Vec<f64> = BT
                .iter()
                .map(|r| r.iter().zip(&d).map(|(a, b)| a * b).sum())
                .collect();
            for (i, a) in AT.iter().enumerate() {
                let got: f64 = a
                    .iter()
                    .zip(u.iter().zip(&v))
                    .map(|(a, (u, v))| a * u * v)
                    .sum();
                let want: f64 = (0..3).map(|k| d[i + k] * gk[k]).sum();
                assert!((got - want).abs() < 1e-14, "output {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn written_out_transforms_match_the_matrices() {
        // Small integers: every sum is exact in f32, so the comparison is exact.
        let mut rng = Rng(7);
        let col: [[f32; LANES]; 6] =
            std::array::from_fn(|_| std::array::from_fn(|_| (rng.f() * 8.0).round()));
        let (mut b, mut a) = ([[0f32; LANES]; 6], [[0f32; LANES]; 4]);
        bt6(std::array::from_fn(|i| &col[i]), &mut b);
        at6(std::array::from_fn(|i| &col[i]), &mut a);
        for l in 0..LANES {
            for i in 0..6 {
                let want: f64 = (0..6).map(|k| BT[i][k] * f64::from(col[k][l])).sum();
                assert_eq!(f64::from(b[i][l]), want, "Bᵀ row {i}");
            }
            for i in 0..4 {
                let want: f64 = (0..6).map(|k| AT[i][k] * f64::from(col[k][l])).sum();
                assert_eq!(f64::from(a[i][l]), want, "Aᵀ row {i}");
            }
        }
    }

    /// The largest |a − b| over the largest |b|.
    fn rel_err(a: &[f32], b: &[f32]) -> f64 {
        let d = a
            .iter()
            .zip(b)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
            .fold(0f64, f64::max);
        d / b
            .iter()
            .fold(0f64, |m, &v| m.max(f64::from(v).abs()))
            .max(1e-30)
    }

    /// Winograd against the direct convolution of the same weight; returns the relative error.
    #[allow(clippy::too_many_arguments)]
    fn compare(
        rng: &mut Rng,
        h: usize,
        w: usize,
        cin: usize,
        cout: usize,
        images: usize,
        groups: Option<usize>,
        block: usize,
    ) -> f64 {
        let g = conv_geom(h, w, cin, 3, 1).unwrap();
        let x = rng.vec(images * h * w * cin, 2.0, 0.5);
        let gamma = rng.vec(cin, 0.5, 1.0);
        let beta = rng.vec(cin, 0.3, 0.0);
        let norm = groups.map(|gr| NormSpec {
            kind: NormKind::Group(gr),
            eps: 1e-5,
            gamma: &gamma,
            beta: &beta,
            silu: true,
        });
        let wvals = rng.vec(cout * 9 * cin, 0.5, 0.0);
        let bytes: Vec<u8> = wvals.iter().flat_map(|v| v.to_le_bytes()).collect();
        let wm = WeightMatrix::new(WeightFormat::F32, &bytes, cout, 9 * cin).unwrap();
        let ww = WinogradWeight::new(&wm, cin).unwrap();
        let n_y = images * h * w * cout;
        let (mut want, mut got) = (vec![0f32; n_y], vec![f32::NAN; n_y]);
        conv2d_cpu_images(&x, images, &g, norm.as_ref(), &wm, &mut want).unwrap();
        winograd_blocks(&x, images, &g, norm.as_ref(), &ww, &mut got, block).unwrap();
        assert!(
            got.iter().all(|v| v.is_finite()),
            "{h}x{w} unwritten outputs"
        );
        rel_err(&got, &want)
    }

    /// Measured: at most 8.0e-6 over the shapes of `matches_direct_convolution` (the direct
    /// product alone is within ~1e-7 of exact); 3e-5 leaves room for other instruction sets'
    /// summation orders, while a wrong tap, position or edge tile gives O(0.1).
    const TOL: f64 = 3e-5;

    #[test]
    fn matches_direct_convolution() {
        let mut rng = Rng(0x5157_0123_4567_89ab);
        let mut worst = 0f64;
        let sizes = [1, 2, 3, 5, 7, 8, 13];
        // (cin, cout, GroupNorm groups)
        let channels = [
            (3, 5, None),
            (8, 17, Some(2)),
            (20, 16, Some(4)),
            (64, 72, Some(32)),
        ];
        for (ci, &(cin, cout, groups)) in channels.iter().enumerate() {
            for (hi, &h) in sizes.iter().enumerate() {
                for (wi, &w) in sizes.iter().enumerate() {
                    // Every size pair for the small channel counts, a diagonal for 64.
                    if cin >= 64 && (hi + wi) % 3 != 0 {
                        continue;
                    }
                    let images = 1 + 2 * ((hi + wi + ci) % 2);
                    for norm in [None, groups] {
                        for block in [usize::MAX, 1] {
                            let e = compare(&mut rng, h, w, cin, cout, images, norm, block);
                            assert!(
                                e < TOL,
                                "{images} x {h}x{w}x{cin} -> {cout} norm {norm:?} block {block}: \
                                 rel err {e:.2e}"
                            );
                            worst = worst.max(e);
                        }
                    }
                }
            }
        }
        println!("winograd vs direct: max relative error {worst:.2e}");
    }

    #[test]
    fn wide_channels_and_default_blocks() {
        // Channels well past the GEMM's panels and k slices, several tile-row blocks.
        let mut rng = Rng(99);
        let (cin, cout) = (130, 96);
        let e = compare(&mut rng, 13, 11, cin, cout, 3, Some(26), 2);
        assert!(e < TOL, "rel err {e:.2e}");
        let tw = 11usize.div_ceil(4);
        assert!(block_tile_rows(tw, cin, cout) >= 1);
        let e = compare(&mut rng, 9, 16, cin, cout, 2, None, usize::MAX);
        assert!(e < TOL, "rel err {e:.2e}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        #[test]
        fn any_shape_matches_direct(
            h in 1usize..12,
            w in 1usize..12,
            cin in 1usize..24,
            cout in 1usize..24,
            images in 1usize..4,
            block in 1usize..6,
            seed in 1u64..u64::MAX,
        ) {
            let e = compare(&mut Rng(seed), h, w, cin, cout, images, None, block);
            proptest::prop_assert!(e < TOL, "rel err {:.2e}", e);
        }
    }

    #[test]
    fn stored_layout_transforms_bit_for_bit_as_the_unfolded_one() {
        let mut rng = Rng(0x0b5e_55ed);
        // Ragged last panels and a single panel; cin of one and of several SIMD runs.
        for (cout, cin) in [(1, 1), (5, 16), (17, 3), (40, 70)] {
            let oihw = rng.vec(cout * cin * 9, 0.5, 0.0);
            let stored: Vec<u8> = oihw.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut unfolded = vec![0f32; oihw.len()];
            for o in 0..cout {
                for c in 0..cin {
                    for tap in 0..9 {
                        unfolded[(o * 9 + tap) * cin + c] = oihw[(o * cin + c) * 9 + tap];
                    }
                }
            }
            let bytes: Vec<u8> = unfolded.iter().flat_map(|v| v.to_le_bytes()).collect();
            let wm = WeightMatrix::new(WeightFormat::F32, &bytes, cout, 9 * cin).unwrap();
            let bits = |w: WinogradWeight| -> Vec<u32> {
                w.u.into_iter()
                    .flat_map(|mut m| {
                        m.panels_mut()
                            .flat_map(|p| p.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            let want = bits(WinogradWeight::new(&wm, cin).unwrap());
            let got = bits(WinogradWeight::from_stored(&stored, cout, cin).unwrap());
            assert!(want == got, "{cout} x {cin}");
            // Position (0, 0) is g[0][0] / 16 exactly: the placement of every pair.
            let w = WinogradWeight::from_stored(&stored, cout, cin).unwrap();
            let mut u0 = w.u[0].clone();
            let p0: Vec<f32> = u0.panels_mut().flat_map(|p| p.to_vec()).collect();
            for o in 0..cout {
                for c in 0..cin {
                    let v = p0[(o / NR * cin + c) * NR + o % NR];
                    assert_eq!(v, oihw[(o * cin + c) * 9] / 16.0, "pair ({o}, {c})");
                }
            }
        }
        let e = WinogradWeight::from_stored(&[0u8; 35], 1, 1).unwrap_err().0;
        assert!(e.contains("35 bytes"), "{e}");
    }

    #[test]
    fn shape_errors_name_the_dimension() {
        let bytes = vec![0u8; 4 * 9 * 8 * 4];
        let wm = WeightMatrix::new(WeightFormat::F32, &bytes, 4, 72).unwrap();
        let e = WinogradWeight::new(&wm, 7).unwrap_err().0;
        assert!(e.contains("columns"), "{e}");
        let ww = WinogradWeight::new(&wm, 8).unwrap();
        assert_eq!((ww.cin(), ww.cout()), (8, 4));
        assert_eq!(ww.size_bytes(), 36 * 16 * 8 * 4);
        let x = vec![0f32; 5 * 6 * 8];
        let mut y = vec![0f32; 5 * 6 * 4];
        let g = conv_geom(5, 6, 8, 3, 1).unwrap();
        conv2d_winograd_images(&x, 1, &g, None, &ww, &mut y).unwrap();
        let e = conv2d_winograd_images(&x[1..], 1, &g, None, &ww, &mut y)
            .unwrap_err()
            .0;
        assert!(e.contains("input x"), "{e}");
        let e = conv2d_winograd_images(&x, 1, &g, None, &ww, &mut y[1..])
            .unwrap_err()
            .0;
        assert!(e.contains("output y"), "{e}");
        let g2 = conv_geom(5, 6, 8, 3, 2).unwrap();
        let e = conv2d_winograd_images(&x, 1, &g2, None, &ww, &mut y)
            .unwrap_err()
            .0;
        assert!(e.contains("stride"), "{e}");
        let g9 = conv_geom(5, 6, 9, 3, 1).unwrap();
        let x9 = vec![0f32; 5 * 6 * 9];
        let e = conv2d_winograd_images(&x9, 1, &g9, None, &ww, &mut y)
            .unwrap_err()
            .0;
        assert!(e.contains("columns"), "{e}");
    }
}
