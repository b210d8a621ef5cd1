//! Winograd F(4×4, 3×3) and F(2×2, 3×3) for the stride-1 `3 × 3` convolutions of
//! [`super::conv`]: the same result (to rounding) with 36 products per 16 outputs and channel
//! pair (F(4×4)) or 16 per 4 (F(2×2)) instead of 144 or 36.
//!
//! The output is cut into tiles of `m × m` pixels (`m` = 4 or 2, [`Variant`]); tile `(ty, tx)`
//! reads the `(m + 2) × (m + 2)` input pixels from `(m·ty − 1, m·tx − 1)` (zeros outside the
//! image, so the padding of 1 on every side and the partial tiles at the right and bottom edges
//! come out of the same gather). With the Lavin–Gray matrices `Bᵀ`, `G`, `Aᵀ` of
//! [`F43`] and [`F23`] (`P = (m + 2)²` positions per tile):
//!
//! - the weight `g` `3 × 3` of each (output, input) channel pair becomes `U = G g Gᵀ`, once at
//!   load ([`WinogradWeight`]);
//! - each input tile `d` (per channel) becomes `V = Bᵀ d B`;
//! - at each of the `P` positions `ξ`, `M_ξ[tiles × cout] = V_ξ[tiles × cin] · U_ξᵀ` is one
//!   packed f32 GEMM ([`matmul_float_packed`]): the channel sum of the element-wise products;
//! - each output tile is `Aᵀ M A` (`m × m`), of which only the pixels inside the output are
//!   written.
//!
//! Layouts are channels-last like [`super::conv`]: `x` `[images][h · w][cin]`, `y`
//! `[images][h · w][cout]`. The transformed tiles live in `[P][tiles][cin]` and
//! `[P][tiles][cout]` buffers for a block of whole tile rows at a time (about 16 MiB, like the
//! direct convolution's unfolded block), reused within a call; the transforms run over runs of
//! [`LANES`] (16 below that many) consecutive channels (vectorizable loops), one pool task per
//! tile row; the `P` products run as tasks of one pool region, each on one thread. The tiling,
//! the transforms' loops and the products are one generic code for both variants; only the
//! matrices differ (`tiles::Tile`).
//!
//! Error: F(4×4)'s transforms multiply values by up to 5 (input) and 8 (output) and sum up to
//! 36 terms more than the direct product does, so its results differ from the direct
//! convolution by a few 1e-6 to 1e-5 relative to the output's largest value (at most 8e-6 in
//! the tests, 1.6e-5 at SD shapes in `examples/conv_winograd.rs`) rather than the 1e-7 of a
//! reordered f32 sum; F(2×2)'s constants are 0, ±1 and ½, and its error is a few 1e-7.

mod tiles;

use super::conv::{check_input_cols, check_output, normalized_images, ConvError};
use crate::backend::{ConvGeom, NormSpec};
use oxinfer_kernels::packed::float::{matmul_float_packed, PackedFloatMatrix, NR};
use oxinfer_kernels::pool::pool_threads;
use oxinfer_kernels::WeightMatrix;
use tiles::Tile;
pub use tiles::{F23, F43};

/// The fewest tiles of one product task (a few register tiles of the GEMM).
const MIN_TASK_TILES: usize = 48;

/// Channels one pass of the tile transforms covers where there are at least this many: long
/// enough runs that the per-run work (gather bounds, loop set-up) is small against the
/// arithmetic (measured: 64 channels per run made the transforms ~35 % faster than 16).
pub const LANES: usize = 64;

/// Channels per pass of the tile transforms below [`LANES`] channels.
const FEW_LANES: usize = 16;

/// Which Winograd algorithm a [`WinogradWeight`] is transformed for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// F(4×4, 3×3): 4 × 4 output tiles from 6 × 6 input tiles; 36 products per 16 outputs (a
    /// quarter of the direct convolution's multiplies), the weight four times the kernel.
    F4x4,
    /// F(2×2, 3×3): 2 × 2 output tiles from 4 × 4 input tiles; 16 products per 4 outputs
    /// (2.25 times fewer multiplies), the weight 16 / 9 = 1.78 times the kernel.
    F2x2,
}

impl Variant {
    /// Output pixels per tile side.
    pub const fn tile_out(self) -> usize {
        match self {
            Variant::F4x4 => 4,
            Variant::F2x2 => 2,
        }
    }

    /// Input pixels per tile side (`tile_out + 3 − 1`).
    pub const fn tile_in(self) -> usize {
        self.tile_out() + 2
    }

    /// Transform positions per tile (`tile_in²`): the products per convolution and the
    /// matrices of a transformed weight.
    pub const fn positions(self) -> usize {
        self.tile_in() * self.tile_in()
    }

    /// The kernel transform `G` (`tile_in` rows of 3 taps).
    fn g(self) -> &'static [[f64; 3]] {
        match self {
            Variant::F4x4 => &F43::G,
            Variant::F2x2 => &F23::G,
        }
    }
}

/// A `3 × 3` convolution weight in the Winograd domain of a [`Variant`]: for each of the `P`
/// positions `ξ` of `U = G g Gᵀ`, the `[cout, cin]` matrix `U_ξ[o][c]` packed for the f32
/// GEMM. Holds `P · ceil(cout / 16) · 16 · cin` f32 values: `P / 9` times the f32 kernel (four
/// times for F(4×4), 1.78 times for F(2×2)).
#[derive(Clone, Debug)]
pub struct WinogradWeight {
    u: Vec<PackedFloatMatrix>,
    variant: Variant,
    cin: usize,
    cout: usize,
}

impl WinogradWeight {
    /// Transforms `w`, a `3 × 3` kernel in the unfolded layout `[cout][ky][kx][cin]` (a
    /// [`WeightMatrix`] of `cout` rows and `9 · cin` columns, in any format the CPU kernels
    /// dequantize), to `U = G g Gᵀ` of `variant` per channel pair ([`Self::from_stored`] says
    /// how).
    ///
    /// # Errors
    /// `cin` is 0 or `w` does not have `9 · cin` columns.
    pub fn new(w: &WeightMatrix, cin: usize, variant: Variant) -> Result<Self, ConvError> {
        if cin == 0 || w.cols != 9 * cin {
            return Err(ConvError(format!(
                "Winograd weight has {} columns, expected 3 * 3 * cin = 9 * {cin} (cin > 0)",
                w.cols
            )));
        }
        Ok(Self::transform(variant, w.rows, cin, |p, live| {
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
    /// channel pair for F(4×4) instead of 324) in f32, about 1e-7 relative to the exact
    /// transform (far below F(4×4)'s own rounding; F(2×2)'s `G` has only 0, ±½ and 1), one
    /// panel of 16 output channels per pool task with the panel's rows as the vector lanes,
    /// each result written straight into its place in the `P` packed matrices.
    ///
    /// # Errors
    /// `cin` is 0 or `src` is not `cout · cin · 9` f32 values.
    pub fn from_stored(
        src: &[u8],
        cout: usize,
        cin: usize,
        variant: Variant,
    ) -> Result<Self, ConvError> {
        if cin == 0 || src.len() != cout * cin * 9 * 4 {
            return Err(ConvError(format!(
                "Winograd kernel of {} bytes, expected {cout} * {cin} * 3 * 3 f32 (cin > 0)",
                src.len()
            )));
        }
        Ok(Self::transform(variant, cout, cin, |p, _| {
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
    fn transform<P, R>(variant: Variant, cout: usize, cin: usize, panel: P) -> Self
    where
        P: Fn(usize, usize) -> R + Sync,
        R: Fn(usize, usize) -> [f32; 9],
    {
        let gf: Vec<[f32; 3]> = variant
            .g()
            .iter()
            .map(|row| row.map(|v| v as f32))
            .collect();
        let (ti, positions) = (variant.tile_in(), variant.positions());
        // One mapping for the P matrices: on huge pages even where each is smaller than one
        // (every SD 1.5 layer below 1920 x 640 channels), a fraction of the page faults.
        let mut u = PackedFloatMatrix::zeroed_many(positions, cout, cin);
        // Panel p of each of the P matrices, gathered per panel: one task's outputs.
        let mut panels: Vec<Vec<&mut [f32]>> = (0..cout.div_ceil(NR))
            .map(|_| Vec::with_capacity(positions))
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
                // t[i][b] = Σ_a G[i][a] g[a][b] (rows i < tile_in of at most 6).
                let mut t = [[0f32; NR]; 18];
                for (ib, ti) in t.iter_mut().enumerate().take(ti * 3) {
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
                    let (i, j) = (xi / ti, xi % ti);
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
        WinogradWeight {
            u,
            variant,
            cin,
            cout,
        }
    }

    /// Input channels.
    pub fn cin(&self) -> usize {
        self.cin
    }

    /// Output channels.
    pub fn cout(&self) -> usize {
        self.cout
    }

    /// The algorithm the weight is transformed for.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// Bytes held (the `P` packed matrices).
    pub fn size_bytes(&self) -> usize {
        self.u.iter().map(PackedFloatMatrix::size_bytes).sum()
    }
}

/// The `3 × 3`, stride-1 convolution of [`super::conv::conv2d_cpu_images_packed`] (padding 1,
/// `oh = h`, `ow = w`; the optional `norm` with its SiLU applied to each image's input before
/// the zero padding) by Winograd with the transformed weight `w` (its [`Variant`]): `x`
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
            "Winograd F(m x m, 3x3) takes kernel size 3 and stride 1, got kernel size {} and \
             stride {}",
            g.k, g.stride
        )));
    }
    check_input_cols(x, images, g, norm, 9 * w.cin)?;
    check_output(images, g, w.cout, y)?;
    let tw = g.w.div_ceil(w.variant.tile_out());
    let block = block_tile_rows(w.variant, tw, w.cin, w.cout);
    winograd_blocks(x, images, g, norm, w, y, block)
}

/// Tile rows per block for `tw` tiles per row: the transformed input and output
/// (`P · tiles · (cin + cout)` floats) within about 4 Mi values (16 MiB), at least one row.
fn block_tile_rows(variant: Variant, tw: usize, cin: usize, cout: usize) -> usize {
    ((4 << 20) / (variant.positions() * tw * (cin + cout)).max(1)).max(1)
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
    let _prof = oxinfer_kernels::profile::scope(
        || format!("conv2d winograd {:?}", w.variant),
        (x.len() * 4) as u64,
        0,
    );
    if w.cout == 0 {
        return Ok(());
    }
    let xn = normalized_images(x, images, g, norm);
    match w.variant {
        Variant::F4x4 => blocks::<F43, 6, 4>(&xn, images, g, w, y, block),
        Variant::F2x2 => blocks::<F23, 4, 2>(&xn, images, g, w, y, block),
    }
    Ok(())
}

/// The convolution of the normalized input `xn` by the algorithm `T` (`IN × IN` input tiles,
/// `OUT × OUT` output tiles; `w` transformed for it), `block` tile rows at a time.
fn blocks<T: Tile<IN, OUT>, const IN: usize, const OUT: usize>(
    xn: &[f32],
    images: usize,
    g: &ConvGeom,
    w: &WinogradWeight,
    y: &mut [f32],
    block: usize,
) {
    debug_assert_eq!((w.variant.tile_in(), w.variant.tile_out()), (IN, OUT));
    let (cin, cout, positions) = (w.cin, w.cout, IN * IN);
    let (th, tw) = (g.h.div_ceil(OUT), g.w.div_ceil(OUT));
    let tile_rows = images * th;
    let block = block.clamp(1, tile_rows);
    let mut v = vec![0f32; positions * block * tw * cin];
    let mut m = vec![0f32; positions * block * tw * cout];
    // Output values of one pixel row of y.
    let row_len = g.w * cout;
    let mut r0 = 0;
    while r0 < tile_rows {
        let nr = block.min(tile_rows - r0);
        let n = nr * tw;
        let (vb, mb) = (
            &mut v[..positions * n * cin],
            &mut m[..positions * n * cout],
        );
        // V_ξ of tile row r is vb[ξ][r·tw .. (r + 1)·tw][cin]: P parts per task.
        let mut parts: Vec<Vec<&mut [f32]>> =
            (0..nr).map(|_| Vec::with_capacity(positions)).collect();
        for vx in vb.chunks_exact_mut(n * cin) {
            for (r, part) in vx.chunks_exact_mut(tw * cin).enumerate() {
                parts[r].push(part);
            }
        }
        oxinfer_kernels::pool::for_each_mut(&mut parts, |r, p| {
            if cin >= LANES {
                input_tile_row::<T, LANES, IN, OUT>(xn, g, r0 + r, p);
            } else {
                input_tile_row::<T, FEW_LANES, IN, OUT>(xn, g, r0 + r, p);
            }
        });
        // The P products (each split in runs of tiles where there are few positions per
        // thread) as tasks of one pool region, each product on one thread: no barrier per
        // product, and a thread keeps its U_ξ in its own cache.
        let splits = (4 * pool_threads())
            .div_ceil(positions)
            .clamp(1, n.div_ceil(MIN_TASK_TILES));
        let per = n.div_ceil(splits);
        let mut jobs: Vec<(usize, &[f32], &mut [f32])> = Vec::with_capacity(positions * splits);
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
        // Tile row R = image · th + ty writes output rows OUT·ty .. min(OUT·ty + OUT, h) of
        // its image: consecutive tile rows own consecutive runs of y.
        let out_rows = |r: usize| OUT.min(g.h - r % th * OUT);
        let start = (r0 / th * g.h + r0 % th * OUT) * row_len;
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
                output_tile_row::<T, LANES, IN, OUT>(mb, n, r * tw, tw, g.w, cout, out);
            } else {
                output_tile_row::<T, FEW_LANES, IN, OUT>(mb, n, r * tw, tw, g.w, cout, out);
            }
        });
        r0 += nr;
    }
}

/// The input transform of tile row `row` (counted over the images of `x`): for each of its
/// `tw` tiles and each run of `L` channels, the `IN × IN` pixels gathered (zeros outside the
/// image), `Bᵀ d B`, and position `ξ` written to `parts[ξ][tx · cin ..][.. cin]`.
fn input_tile_row<T: Tile<IN, OUT>, const L: usize, const IN: usize, const OUT: usize>(
    x: &[f32],
    g: &ConvGeom,
    row: usize,
    parts: &mut [&mut [f32]],
) {
    let (cin, th) = (g.cin, g.h.div_ceil(OUT));
    let image = &x[row / th * g.h * g.w * cin..(row / th + 1) * g.h * g.w * cin];
    let y0 = (row % th * OUT) as isize - 1;
    let tw = g.w.div_ceil(OUT);
    for tx in 0..tw {
        let x0 = (tx * OUT) as isize - 1;
        for c0 in (0..cin).step_by(L) {
            let lanes = L.min(cin - c0);
            let mut d = [[[0f32; L]; IN]; IN];
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
            let mut t = [[[0f32; L]; IN]; IN];
            for (j, tj) in t.iter_mut().enumerate() {
                T::bt(std::array::from_fn(|i| &d[i][j]), tj);
            }
            let mut v = [[0f32; L]; IN];
            let dst = tx * cin + c0;
            for i in 0..IN {
                T::bt(std::array::from_fn(|j| &t[j][i]), &mut v);
                for (j, vj) in v.iter().enumerate() {
                    parts[i * IN + j][dst..dst + lanes].copy_from_slice(&vj[..lanes]);
                }
            }
        }
    }
}

/// The output transform of the `tw` tiles from tile `t0` of the block (`m` `[P][n][cout]`):
/// `Aᵀ M A` per run of `L` channels, the pixels inside the output written to `out`
/// (the tile row's output rows, at most `OUT`: `[rows][width][cout]`).
fn output_tile_row<T: Tile<IN, OUT>, const L: usize, const IN: usize, const OUT: usize>(
    m: &[f32],
    n: usize,
    t0: usize,
    tw: usize,
    width: usize,
    cout: usize,
    out: &mut [f32],
) {
    for tx in 0..tw {
        let cols = OUT.min(width - tx * OUT);
        for c0 in (0..cout).step_by(L) {
            let lanes = L.min(cout - c0);
            let mut s = [[[0f32; L]; IN]; IN];
            for (xi, sv) in s.iter_mut().flatten().enumerate() {
                let src = (xi * n + t0 + tx) * cout + c0;
                sv[..lanes].copy_from_slice(&m[src..src + lanes]);
            }
            // Aᵀ M over the rows (t[j] is column j of Aᵀ M), then (Aᵀ M) A over the columns.
            let mut t = [[[0f32; L]; OUT]; IN];
            for (j, tj) in t.iter_mut().enumerate() {
                T::at(std::array::from_fn(|i| &s[i][j]), tj);
            }
            let mut o = [[0f32; L]; OUT];
            for (i, out_row) in out.chunks_exact_mut(width * cout).enumerate() {
                T::at(std::array::from_fn(|j| &t[j][i]), &mut o);
                for (j, oj) in o.iter().enumerate().take(cols) {
                    let dst = (tx * OUT + j) * cout + c0;
                    out_row[dst..dst + lanes].copy_from_slice(&oj[..lanes]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
