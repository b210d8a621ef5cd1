//! Packed weights: eight rows interleaved so that a SIMD register holds one value per row, and
//! the GEMM / GEMV that multiplies them with int8-quantized activations.
//!
//! The row-major GGUF layout keeps each row's blocks (scale + quants) together, so a kernel
//! that dots one row with one token pays the scale work (f16 conversion, scale multiply,
//! float accumulate) per (row, token, block). Packing puts eight rows side by side: one
//! 256-bit register holds four consecutive quants of each of the eight rows (one 32-bit lane
//! per row), one broadcast of four activation bytes serves all eight rows, and one scale
//! multiply / fused add finishes eight rows at once. Tiles of up to four tokens share each
//! unpacked weight register. (The idea is llama.cpp's ggml-cpu "repack" of weights into
//! multi-row blocks; the layouts and kernels here are our own.)
//!
//! A [`PackedMatrix`] holds `ceil(rows / 8)` groups of eight rows (the last one padded with
//! zero rows); group `g` holds rows `8g .. 8g + 8` as `cols / block_size` packed blocks back
//! to back, each [`PackedMatrix::block_bytes`] long. Within a packed block, "lane `r`" is row
//! `8g + r`, and `W_j` (the `j`-th 32-byte quant register) holds quants `4j .. 4j + 4` of
//! each row's 32-weight sub-block in bytes `4r .. 4r + 4`:
//!
//! - `Q4_0` (144 B): `d: [f16; 8]`, then 4 × 32 B nibble chunks: chunk `c` byte `4r + b` =
//!   `q[8c + b] | q[8c + 4 + b] << 4` (so chunk `c` yields `W_2c` from its low nibbles and
//!   `W_2c+1` from its high nibbles); weight = `d * (q - 8)`.
//! - `Q4_1` (160 B): `d: [f16; 8]`, `m: [f16; 8]`, nibble chunks as Q4_0; weight = `d * q + m`.
//! - `Q5_0` (176 B): `d: [f16; 8]`, `qh: [u8; 32]` (byte `4r + b` holds at bit `j` the fifth
//!   bit of quant `4j + b`), nibble chunks as Q4_0; weight = `d * (q - 16)`.
//! - `Q5_1` (192 B): `d: [f16; 8]`, `m: [f16; 8]`, `qh` and nibbles as Q5_0; weight = `d * q + m`.
//! - `Q8_0` (272 B): `d: [f16; 8]`, then `W_0 .. W_7` (signed quants); weight = `d * q`.
//! - `Q4_K` (1184 B, 256 weights): `d: [f16; 8]`, `dmin: [f16; 8]`, `sc: [u8; 8 sub][8 lanes]`,
//!   mins as pairs `m: [u8; 4 pair][8 lanes][2]` (sub-blocks `2p`, `2p + 1`), then 8
//!   sub-blocks of 4 nibble chunks as Q4_0; weight = `d * sc * q - dmin * m`. Same bytes as
//!   eight GGUF rows plus 32 (the 6-bit scales are stored as bytes): +2.8 %.
//! - `Q5_K` (1440 B, 256 weights): `d`, `dmin`, `sc`, `m` as `Q4_K`, then 8 sub-blocks of
//!   160 B: 4 nibble chunks, then 32 high-bit bytes as `Q5_0`'s `qh` (byte `4r + b` holds at
//!   bit `j` the fifth bit of quant `4j + b`).
//! - `Q6_K` (1680 B, 256 weights): `d: [f16; 8]`, scales as pairs `sc: [i8; 8 sub][8 lanes][2]`
//!   (groups of 16 `2s`, `2s + 1`), then 8 sub-blocks of 192 B: low nibbles (4 chunks as
//!   Q4_0), then high bits (2 × 32 B: chunk `h` byte `4r + b` holds, at bits `2k .. 2k + 2`,
//!   the top two bits of quant `16h + 4k + b`); weight = `d * sc * (q - 32)`.
//! - `Q3_K` (912 B, 256 weights): `d` and `sc` as `Q6_K` (the scale offset 32 taken off),
//!   then 8 sub-blocks of 96 B: two 32-byte low planes (plane `h` byte `4r + b` holds, at bits
//!   `2k .. 2k + 2`, the low bits of quant `16h + 4k + b`) and one high plane (byte `4r + b`,
//!   bit `4h + k`: that quant's third bit); weight = `d * sc * (q - 4)`. The `Q6_K` kernel
//!   runs it with another unpacking of its four registers: +3.6 % over the file.
//! - `Q2_K` (672 B, 256 weights): `d: [f16; 8]`, `dmin: [f16; 8]`, the file's scale bytes
//!   (`sc | m << 4` per group of 16) as pairs `[8 sub][8 lanes][2]`, then 8 sub-blocks of two
//!   2-bit planes as `Q3_K`'s low planes; weight = `d * sc * q - dmin * m`. The same kernel,
//!   with the mins' `m · bsums` summed apart as `Q4_K`'s: the file's size.
//!
//! - `IQ4_NL` (144 B): `d: [f16; 8]`, nibble chunks as Q4_0 holding 4-bit indices; weight =
//!   `d * KVALUES_IQ4NL[q]`. `MXFP4` (136 B): the E8M0 bytes `e: [u8; 8]`, then the same
//!   chunks; weight = `e8m0_half(e) * KVALUES_MXFP4[q]`. The kernels look the indices up with
//!   a byte shuffle and multiply the signed values as Q8_0's.
//! - 256-weight table formats (IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
//!   TQ1_0, TQ2_0; 1168 B): every one of their integer quants takes at most 16 values, so
//!   packing decodes the grids once and stores 4-bit indices into a per-format table
//!   (`pack::t4_table`): `d: [f16; 8]`, integer scales `sc: [i8; 16 groups][8 lanes]`, then 8
//!   sub-blocks of 4 nibble chunks as Q4_0; weight = `d * unit * sc[group] * table[q]`. The
//!   decode kernels then skip the grid lookups (IQ2_XS: 592 B per 8 rows become 1168 B), at a
//!   memory cost: by default only the formats whose packed copy stays within
//!   [`MAX_DEFAULT_GROWTH`] of the file are packed (of these, IQ4_XS), the rest on request
//!   (`OXINFER_PACKED=all`; [`packing_allowed`]).
//!
//! The other formats are not packed ([`PackedMatrix::pack`] returns `None`) and keep the
//! row-major kernels of [`crate::fast`].

#[cfg(target_arch = "x86_64")]
mod avx2;
pub mod float;
mod pack;
mod row;
mod scalar;
mod simd128;
#[cfg(test)]
mod tests;
mod tiles;
#[cfg(target_arch = "x86_64")]
mod vnni;
#[cfg(target_arch = "x86_64")]
mod vnni_gemv;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::dispatch::{detected_isa, Isa, PackingMode};
use crate::fast::{quantize_acts, Acts, SyncPtr};
use crate::format::WeightFormat;
use crate::huge::HugeBytes;
use crate::matrix::WeightMatrix;
use crate::pool::{parallel_for, pool_threads};

/// Source bytes packed between two calls of [`PackedMatrix::pack_releasing`]'s callback.
pub const PACK_SLAB_BYTES: usize = 4 << 20;

pub use pack::LANES;
pub use tiles::TILE_TOKENS;

/// The widest token tile of `isa`'s packed kernels (tiles of fewer tokens take at most 4).
fn tile_width(isa: Isa) -> usize {
    if isa.has_vnni() {
        8
    } else {
        4
    }
}

/// Tokens of a cache block: a task walks its row groups once per block of this many tokens,
/// so the block's activations stay in L2 while the task's weights stream from L2/L3.
const TOKEN_BLOCK: usize = 64;

/// A `[rows, cols]` weight matrix repacked into groups of [`LANES`] interleaved rows (see the
/// module doc for the layouts). Owns its bytes (`ceil(rows / 8) * 8 * row_bytes(cols)` plus
/// 32 bytes per Q4_K super-block group), on transparent huge pages where the OS offers them
/// ([`HugeBytes`]).
#[derive(Clone, Debug)]
pub struct PackedMatrix {
    format: WeightFormat,
    rows: usize,
    cols: usize,
    data: HugeBytes,
}

impl PackedMatrix {
    /// Whether `format` has a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
    /// IQ4_NL, MXFP4 and the 256-weight IQ/TQ formats).
    pub fn supports(format: WeightFormat) -> bool {
        pack::packed_block_bytes(format).is_some()
    }

    /// Repacks `w` (parallel over row groups on the pool); `None` when its format has no
    /// packed layout.
    pub fn pack(w: &WeightMatrix) -> Option<Self> {
        Self::pack_releasing(w, &mut |_| {})
    }

    /// [`Self::pack`] in slabs of about [`PACK_SLAB_BYTES`] of source rows, calling
    /// `done(rows)` after each slab with the source rows it has finished reading, so the
    /// caller can drop them from memory while the rest is packed (peak memory: the packed
    /// copy plus one slab, not plus the whole source).
    pub fn pack_releasing(
        w: &WeightMatrix,
        done: &mut dyn FnMut(std::ops::Range<usize>),
    ) -> Option<Self> {
        let pb = pack::packed_block_bytes(w.format)?;
        let nb = w.cols / w.format.block_size();
        let groups = w.rows.div_ceil(LANES);
        let group_bytes = nb * pb;
        let mut data = HugeBytes::zeroed(groups * group_bytes);
        let dp = SyncPtr(data.as_mut_ptr());
        let slab = (PACK_SLAB_BYTES / group_bytes.max(1)).max(1);
        for g0 in (0..groups).step_by(slab) {
            let g1 = (g0 + slab).min(groups);
            parallel_for(g1 - g0, &|i| {
                let g = g0 + i;
                // SAFETY: group g owns bytes [g*group_bytes, (g+1)*group_bytes) of `data`,
                // which outlives parallel_for; no two tasks share a group.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(dp.get().add(g * group_bytes), group_bytes)
                };
                pack::pack_group(w, g, out);
            });
            done(g0 * LANES..(g1 * LANES).min(w.rows));
        }
        Some(PackedMatrix {
            format: w.format,
            rows: w.rows,
            cols: w.cols,
            data,
        })
    }

    /// Storage format of the original weights.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    /// Number of rows (output features).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (input features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes held.
    pub fn size_bytes(&self) -> usize {
        self.data.len()
    }

    /// Dequantizes row `row` into `out` (`cols` values), bit-identical to the row-major
    /// dequantizer on the original bytes (for a tied embedding table read from the packed
    /// copy of the output head).
    ///
    /// # Panics
    /// If `row >= rows` or `out.len() != cols`.
    pub fn dequantize_row_into(&self, row: usize, out: &mut [f32]) {
        assert!(row < self.rows, "row {row} of a {}-row matrix", self.rows);
        assert_eq!(
            out.len(),
            self.cols,
            "out must hold cols = {} values",
            self.cols
        );
        row::dequant_lane(self.format, self.group(row / LANES), row % LANES, out);
    }

    /// Bytes of one packed block (eight rows × one format block).
    pub fn block_bytes(&self) -> usize {
        pack::packed_block_bytes(self.format).unwrap_or(0)
    }

    fn groups(&self) -> usize {
        self.rows.div_ceil(LANES)
    }

    fn blocks_per_row(&self) -> usize {
        self.cols / self.format.block_size()
    }

    fn group(&self, g: usize) -> &[u8] {
        let gb = self.blocks_per_row() * self.block_bytes();
        &self.data[g * gb..(g + 1) * gb]
    }
}

/// The most packed bytes per file byte that a format may cost by default: the packed copy
/// replaces the mapped rows, so a format above it (IQ3_S 1.33×, IQ3_XXS 1.49×, IQ2_S 1.78×,
/// IQ2_XS 1.97×, IQ2_XXS / TQ2_0 2.21×, IQ1_M 2.61×, TQ1_0 2.70×, IQ1_S 2.92×: what a user
/// picked to fit a model in RAM) stays on its row-major kernels unless the whole model stays
/// within it anyway ([`model_fits_packed`]: a few such tensors among 4-bit ones) or
/// `OXINFER_PACKED=all`.
/// Everything at or below it grows by at most 7.4 % (IQ4_XS; the K-quants 2.3–2.8 %, the
/// 32-weight formats, Q2_K and Q6_K 0 %, Q3_K 3.6 %).
pub const MAX_DEFAULT_GROWTH: f64 = 1.25;

/// Packed bytes per file byte of `format` (one packed block of eight rows against eight rows'
/// GGUF blocks; a last group of fewer than eight rows adds its zero padding on top), `None`
/// for formats without a packed layout.
pub fn packed_growth(format: WeightFormat) -> Option<f64> {
    let packed = pack::packed_block_bytes(format)?;
    Some(packed as f64 / (LANES * format.block_bytes()) as f64)
}

/// The memory rule: whether weights of `format` are packed under `mode` ([`PackingMode::Off`]:
/// none; [`PackingMode::All`]: every format with a packed layout; [`PackingMode::Compact`], the
/// default: those whose [`packed_growth`] is at most [`MAX_DEFAULT_GROWTH`]).
pub fn packing_allowed(format: WeightFormat, mode: PackingMode) -> bool {
    match (mode, packed_growth(format)) {
        (_, None) | (PackingMode::Off, _) => false,
        (PackingMode::All, Some(_)) => true,
        (PackingMode::Compact, Some(g)) => g <= MAX_DEFAULT_GROWTH,
    }
}

/// Whether `format` is packed here: the memory rule allows it under this process's
/// `OXINFER_PACKED` ([`packing_allowed`], [`crate::dispatch::packing_mode`]), this CPU has
/// packed kernels for it ([`packed_kernels`]) and the kernel set is `auto`.
pub fn packing_pays(format: WeightFormat) -> bool {
    packing_pays_in(format, false)
}

/// [`packing_pays`] for a weight of a model that [`model_fits_packed`]: under the default
/// mode such a model's growing formats (IQ2_XS and the like, usually a few tensors among
/// 4-bit ones) are packed too, since the whole model stays within [`MAX_DEFAULT_GROWTH`] of
/// its file.
pub fn packing_pays_in(format: WeightFormat, model_fits: bool) -> bool {
    let mode = crate::dispatch::packing_mode();
    let allowed = packing_allowed(format, mode)
        || (model_fits
            && mode == crate::dispatch::PackingMode::Compact
            && packed_growth(format).is_some());
    allowed
        && crate::dispatch::kernel_set() == crate::dispatch::KernelSet::Auto
        && packed_kernels(format, detected_isa())
}

/// The memory rule over a whole model: whether packing every tensor whose format has a packed
/// layout (`tensors`: each one's format and file bytes) keeps the model within
/// [`MAX_DEFAULT_GROWTH`] of its file bytes. Tensors that are never packed (embedding tables,
/// norms) are counted as if they were, so the estimate errs on the side of memory.
pub fn model_fits_packed(tensors: impl IntoIterator<Item = (WeightFormat, usize)>) -> bool {
    let (mut file, mut packed) = (0f64, 0f64);
    for (format, bytes) in tensors {
        file += bytes as f64;
        packed += bytes as f64 * packed_growth(format).unwrap_or(1.0);
    }
    packed <= file * MAX_DEFAULT_GROWTH
}

/// `y[t][rows] = x[t][cols] · Wᵀ` with the packed weights `w` (activations quantized to int8
/// once per call), on the best instruction set of this CPU.
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul_packed(w: &PackedMatrix, x: &[f32], t: usize, y: &mut [f32]) {
    let _p = crate::profile::scope(
        || format!("matmul {}", w.format),
        w.data.len() as u64,
        2 * (w.rows * w.cols * t) as u64,
    );
    matmul_packed_isa(w, x, t, y, detected_isa());
}

/// [`matmul_packed`] on a given instruction set (`Isa::Avx512Vnni`, `Isa::Avx2` or the scalar
/// twin, which every other value selects; an [`Isa`] is only ever one the CPU has).
///
/// # Panics
/// If `x.len() != t * cols` or `y.len() != t * rows`.
pub fn matmul_packed_isa(w: &PackedMatrix, x: &[f32], t: usize, y: &mut [f32], isa: Isa) {
    matmul_packed_variant(w, x, t, y, isa, use_pairs(w.format, isa, t));
}

/// [`matmul_packed_isa`] with the two-group kernels on or off as asked (for measuring both;
/// `pairs` is ignored where [`pairs_possible`] is false).
pub(crate) fn matmul_packed_variant(
    w: &PackedMatrix,
    x: &[f32],
    t: usize,
    y: &mut [f32],
    isa: Isa,
    pairs: bool,
) {
    crate::matrix::check_io(x.len(), y.len(), t, w.rows, w.cols);
    if w.rows == 0 || t == 0 {
        return;
    }
    let acts = quantize_acts(w.format, x, t, w.cols);
    let tasks = Tasks::new(w, isa, pairs);
    let out = SyncPtr(y.as_mut_ptr());
    parallel_for(tasks.count, &|task| tasks.run(w, &acts, task, t, &out));
}

/// Several packed products over one input: `ys[i][t][rows_i] = x[t][cols] · W_iᵀ` (the
/// q/k/v or gate/up projections of a layer). When the matrices share `cols` and the
/// activation rounding of their formats, the activations are rounded once and every
/// matrix's row groups run in one parallel region (a decode step otherwise pays a region,
/// its tail and a rounding per matrix); each output is bit-identical to [`matmul_packed`]
/// on its matrix alone (the same tasks over the same groups). Otherwise, one
/// [`matmul_packed`] each.
///
/// # Panics
/// If `ws.len() != ys.len()`, or for any `i`, `x.len() != t * cols_i` or
/// `ys[i].len() != t * rows_i`.
pub fn matmul_packed_shared(ws: &[&PackedMatrix], x: &[f32], t: usize, ys: &mut [&mut [f32]]) {
    assert_eq!(ws.len(), ys.len(), "one output per matrix");
    let Some(first) = ws.first() else { return };
    let joint = ws.iter().all(|w| {
        w.cols == first.cols
            && crate::vecdot::act_kind(w.format) == crate::vecdot::act_kind(first.format)
    });
    if !joint || ws.len() == 1 {
        for (w, y) in ws.iter().zip(ys.iter_mut()) {
            matmul_packed(w, x, t, y);
        }
        return;
    }
    for (w, y) in ws.iter().zip(ys.iter()) {
        crate::matrix::check_io(x.len(), y.len(), t, w.rows, w.cols);
    }
    let bytes: usize = ws.iter().map(|w| w.data.len()).sum();
    let flops: usize = ws.iter().map(|w| 2 * w.rows * w.cols * t).sum();
    let _p = crate::profile::scope(
        || format!("matmul {}", joint_name(ws)),
        bytes as u64,
        flops as u64,
    );
    if t == 0 {
        return;
    }
    let isa = detected_isa();
    let acts = quantize_acts(first.format, x, t, first.cols);
    let tasks: Vec<Tasks> = ws
        .iter()
        .map(|w| Tasks::new(w, isa, use_pairs(w.format, isa, t)))
        .collect();
    // Task i of the region is task i - starts[m] of matrix m, for the last m with
    // starts[m] <= i.
    let starts: Vec<usize> = tasks
        .iter()
        .scan(0, |acc, k| {
            let s = *acc;
            *acc += k.count;
            Some(s)
        })
        .collect();
    let total = starts.last().copied().unwrap_or(0) + tasks.last().map_or(0, |k| k.count);
    let outs: Vec<SyncPtr<f32>> = ys.iter_mut().map(|y| SyncPtr(y.as_mut_ptr())).collect();
    parallel_for(total, &|i| {
        let m = starts.partition_point(|&s| s <= i) - 1;
        tasks[m].run(ws[m], &acts, i - starts[m], t, &outs[m]);
    });
}

/// The profile name of a joint product: its formats, each once, in order (`Q4_K+Q6_K`).
fn joint_name(ws: &[&PackedMatrix]) -> String {
    let mut names: Vec<String> = Vec::new();
    for w in ws {
        let n = w.format.to_string();
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names.join("+")
}

/// How one matrix's product is cut into pool tasks: runs of `chunk` row groups (whole pairs
/// with the two-group kernels), the same cut whether the matrix runs alone or beside others.
struct Tasks {
    chunk: usize,
    count: usize,
    isa: Isa,
    /// Whether the two-group (x86 AVX-512) kernels run it.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pairs: bool,
}

impl Tasks {
    fn new(w: &PackedMatrix, isa: Isa, pairs: bool) -> Self {
        let pairs = pairs && pairs_possible(w.format, isa);
        let groups = w.groups();
        let mut chunk = groups.div_ceil(pool_threads() * 4).clamp(1, 32);
        if pairs {
            // Tasks hold whole pairs of groups (the last task may end on a single one).
            chunk = chunk.next_multiple_of(2);
        }
        Tasks {
            chunk,
            count: if w.rows == 0 {
                0
            } else {
                groups.div_ceil(chunk)
            },
            isa,
            pairs,
        }
    }

    /// Runs task `task`: its row groups against all `t` tokens of `acts`, into `out`
    /// (`[t, rows]`, each task writing only its own rows).
    fn run(&self, w: &PackedMatrix, acts: &Acts, task: usize, t: usize, out: &SyncPtr<f32>) {
        let (rows, groups) = (w.rows, w.groups());
        let nb = w.blocks_per_row();
        let width = tile_width(self.isa);
        let g0 = task * self.chunk;
        let g1 = (g0 + self.chunk).min(groups);
        let mut tile = [[0f32; LANES]; TILE_TOKENS];
        for tb0 in (0..t).step_by(TOKEN_BLOCK) {
            let tb1 = (tb0 + TOKEN_BLOCK).min(t);
            let mut g = g0;
            while g < g1 {
                #[cfg(target_arch = "x86_64")]
                if self.pairs && g + 1 < g1 {
                    let mut ti = tb0;
                    while ti < tb1 {
                        let n = (tb1 - ti).min(PAIR_TOKENS);
                        pair_tile(w, acts, g, ti, n, out);
                        ti += n;
                    }
                    g += 2;
                    continue;
                }
                let gdata = w.group(g);
                let live = (rows - g * LANES).min(LANES);
                let mut ti = tb0;
                while ti < tb1 {
                    let rem = tb1 - ti;
                    let n = if rem >= width { width } else { rem.min(4) };
                    run_tile(w.format, self.isa, gdata, nb, acts, ti, n, &mut tile);
                    for (k, lanes) in tile.iter().take(n).enumerate() {
                        // SAFETY: (ti + k) < t and g*8 + live <= rows, so the `live` elements
                        // are inside the output (t * rows); row groups g0..g1 belong to this
                        // task only, so no two tasks write the same element; the output
                        // outlives the parallel region. (A whole group is one constant-size
                        // copy: one 32-byte store.)
                        unsafe {
                            let dst = out.get().add((ti + k) * rows + g * LANES);
                            if live == LANES {
                                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, LANES);
                            } else {
                                std::ptr::copy_nonoverlapping(lanes.as_ptr(), dst, live);
                            }
                        }
                    }
                    ti += n;
                }
                g += 1;
            }
        }
    }
}

/// Tokens per call of the two-group kernels (four accumulators of 16 rows each per token fit
/// the 32 vector registers).
#[cfg(target_arch = "x86_64")]
const PAIR_TOKENS: usize = 4;

/// Whether the two-group (16-row, 512-bit) kernels exist for `format` and can run on `isa` on
/// this CPU.
pub(crate) fn pairs_possible(format: WeightFormat, isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() && vnni_gemv::handles(format) && crate::dispatch::two_group_supported() {
        return true;
    }
    let _ = (format, isa);
    false
}

/// Whether a product of `format` over `t` tokens on `isa` takes the two-group kernels:
/// possible, and chosen for this format and product size
/// ([`crate::dispatch::two_group_choice`]).
fn use_pairs(format: WeightFormat, isa: Isa, t: usize) -> bool {
    let choice = crate::dispatch::two_group_choice().at(t);
    let chosen = match format {
        WeightFormat::Q4K => choice.q4k,
        WeightFormat::Q6K => choice.q6k,
        _ => false,
    };
    chosen && pairs_possible(format, isa)
}

/// Groups `g` and `g + 1` of `w` against tokens `ti .. ti + n` (`n <= PAIR_TOKENS`) of `acts`
/// into `out` (`[t, rows]`).
#[cfg(target_arch = "x86_64")]
fn pair_tile(w: &PackedMatrix, acts: &Acts, g: usize, ti: usize, n: usize, out: &SyncPtr<f32>) {
    let Acts::Q8K(q) = acts else {
        unreachable!("the two-group kernels are for K-quant formats")
    };
    let nb = w.blocks_per_row();
    let live = (w.rows - g * LANES).min(2 * LANES);
    let (a, b) = (w.group(g).as_ptr(), w.group(g + 1).as_ptr());
    let x = |k: usize| q[(ti + k) * nb..(ti + k + 1) * nb].as_ptr();
    let mut o = [[0f32; 2 * LANES]; PAIR_TOKENS];
    macro_rules! go {
        ($kern:ident) => {
            // SAFETY: pairs_possible checked the CPU features (an Avx512Vnni level: AVX-512 F/VL/VNNI
            // with AVX2, FMA, F16C; pairs_possible: AVX-512 BW); a and b are whole packed groups of nb blocks; each x(k) starts nb blocks
            // of token ti + k < t (bounds checked by the slicing).
            unsafe {
                match n {
                    1 => vnni_gemv::$kern::<1>(a, b, nb, [x(0)], (&mut o[..1]).try_into().unwrap()),
                    2 => vnni_gemv::$kern::<2>(
                        a,
                        b,
                        nb,
                        [x(0), x(1)],
                        (&mut o[..2]).try_into().unwrap(),
                    ),
                    3 => vnni_gemv::$kern::<3>(
                        a,
                        b,
                        nb,
                        [x(0), x(1), x(2)],
                        (&mut o[..3]).try_into().unwrap(),
                    ),
                    _ => vnni_gemv::$kern::<4>(a, b, nb, [x(0), x(1), x(2), x(3)], &mut o),
                }
            }
        };
    }
    if w.format == WeightFormat::Q4K {
        go!(gemv2_q4k)
    } else {
        go!(gemv2_q6k)
    }
    for (k, row) in o.iter().take(n).enumerate() {
        // SAFETY: token ti + k < t and rows g*8 .. g*8 + live <= rows lie inside y ([t, rows]);
        // these two groups belong to the calling task only; `y` outlives the parallel region.
        unsafe {
            std::ptr::copy_nonoverlapping(
                row.as_ptr(),
                out.get().add((ti + k) * w.rows + g * LANES),
                live,
            )
        };
    }
}

/// Computes `tile[k][r]` = row `r` of the group `gdata` · token `ti + k`, for `k < n`.
#[allow(clippy::too_many_arguments)]
fn run_tile(
    format: WeightFormat,
    isa: Isa,
    gdata: &[u8],
    nb: usize,
    acts: &Acts,
    ti: usize,
    n: usize,
    tile: &mut [[f32; LANES]; TILE_TOKENS],
) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_vnni() {
        // SAFETY: an Avx512Vnni level is only handed out when the CPU has AVX-512 F/VL/VNNI
        // with AVX2, FMA, F16C (detected together); group and activations as below.
        unsafe { vnni::tile(format, gdata, nb, acts, ti, n, tile) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: an AVX2 level is only handed out when the CPU has AVX2 (and FMA, F16C:
        // detected together); `gdata` is one whole packed group of `nb` blocks of `format`, and `acts`
        // holds `nb` blocks for every token below t > ti + n - 1.
        unsafe { avx2::tile(format, gdata, nb, acts, ti, n, tile) };
        return;
    }
    #[cfg(all(
        target_arch = "wasm32",
        target_feature = "simd128",
        target_feature = "relaxed-simd"
    ))]
    if isa == Isa::RelaxedSimd128
        && simd128::tile::<simd128::Relaxed>(format, gdata, nb, acts, ti, n, tile)
    {
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if isa.is_simd128() && simd128::tile::<simd128::Widen>(format, gdata, nb, acts, ti, n, tile) {
        return;
    }
    let _ = isa;
    scalar::tile(format, gdata, nb, acts, ti, n, tile);
}

/// Whether `format` has packed kernels for `isa` (the scalar twin exists for tests, not for
/// speed): every packed format on the AVX2 levels; Q4_0, Q4_1, Q8_0 and IQ4_NL on SIMD128.
pub fn packed_kernels(format: WeightFormat, isa: Isa) -> bool {
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if isa.is_simd128() {
        return simd128::handles(format);
    }
    isa.has_avx2() && PackedMatrix::supports(format)
}
