//! The WGSL kernels: their sources (`shaders/`, assembled per kernel), entry points, and one
//! builder per kernel that turns offsets and sizes into a [`Dispatch`] (the only place that
//! knows each kernel's parameter words and bindings).

use oxinfer::nn::encoder_act::EncoderAct;
use oxinfer::nn::encoder_attention::EncoderHeads;
use oxinfer_kernels::act::GateAct;
use oxinfer_kernels::WeightFormat;

const COMMON: &str = include_str!("shaders/common.wgsl");
const MATMUL: &str = include_str!("shaders/matmul.wgsl");
const DECODE: &str = include_str!("shaders/decode.wgsl");
const WORDS: &str = include_str!("shaders/words.wgsl");
const MATVEC: &str = include_str!("shaders/matvec.wgsl");
const VECDOT: &str = include_str!("shaders/vecdot.wgsl");
const QUANT: &str = include_str!("shaders/quant.wgsl");
const NORM: &str = include_str!("shaders/norm.wgsl");
const ELEMENTWISE: &str = include_str!("shaders/elementwise.wgsl");
const ROWS: &str = include_str!("shaders/rows.wgsl");
const ATTENTION: &str = include_str!("shaders/attention.wgsl");
const COPY: &str = include_str!("shaders/copy.wgsl");
const ENCODER: &str = include_str!("shaders/encoder.wgsl");

/// One kernel launch: parameters, storage buffers by binding, workgroup count.
pub(crate) struct Dispatch {
    pub kernel: Kernel,
    pub params: [u32; 16],
    pub bufs: Vec<(u32, wgpu::Buffer)>,
    /// Workgroups, flat (split over x and y at launch).
    pub groups: u32,
}

impl Dispatch {
    /// The kernel's name for profiles: with its shape (`n x k`) for matrix products.
    pub(crate) fn label(&self) -> String {
        match self.kernel {
            Kernel::Matmul(_) | Kernel::Matvec(_) => {
                format!("{:?} {}x{}", self.kernel, self.params[2], self.params[3])
            }
            k => format!("{k:?}"),
        }
    }
}

/// The parameter words from a list of `u32`s (the rest zero).
pub(crate) fn words(v: &[u32]) -> [u32; 16] {
    let mut p = [0u32; 16];
    p[..v.len()].copy_from_slice(v);
    p
}

/// `decode32` of the float formats, from their one-weight `wval`.
const FLOAT_DECODE: &str = "
fn decode32(n: u32, g: u32, out: ptr<function, array<f32, 32>>) {
    for (var j = 0u; j < 32u; j++) { (*out)[j] = wval(n, g * 32u + j); }
}
";

/// The columns past the last whole group of 32 (float formats: rows of any width).
const FLOAT_TAIL: &str = "
    for (var i = groups * 32u + lane; i < k; i += LANES) {
        let w = wval(n, i);
        for (var j = 0u; j < rows; j++) { acc[j] += w * A[pu(0u) + (t0 + j) * k + i]; }
    }
";

/// Activation rows one matmul workgroup multiplies (`ROWS` in `matmul.wgsl`).
pub(crate) const MATMUL_ROWS: usize = 8;

/// Output rows one matmul workgroup computes (`ROWS_OUT` in `matmul.wgsl`).
pub(crate) const MATMUL_OUT_ROWS: usize = 4;

/// The matvec's geometry: threads per workgroup, output rows per lane group (1 to 4), most
/// lanes per group, chunks per loop step (1 or 2: two chunks' loads issued together).
/// `OXINFER_WGPU_MATVEC_SHAPE=threads,rows,lanes,unroll` sets it for tuning (threads and lanes
/// powers of two, lanes ≤ threads ≤ 256); default `64,2,64,1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MatvecShape {
    pub threads: usize,
    pub rows: usize,
    pub max_lanes: usize,
    pub unroll: usize,
}

impl MatvecShape {
    /// The shape in use (the environment's, read once, else the default).
    pub(crate) fn get() -> MatvecShape {
        static SHAPE: std::sync::OnceLock<MatvecShape> = std::sync::OnceLock::new();
        *SHAPE.get_or_init(|| {
            let v = std::env::var("OXINFER_WGPU_MATVEC_SHAPE").unwrap_or_default();
            let n: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            match n[..] {
                [threads, rows, max_lanes, unroll]
                    if threads.is_power_of_two()
                        && max_lanes.is_power_of_two()
                        && (4..=threads).contains(&max_lanes)
                        && threads <= 256
                        && (1..=4).contains(&rows)
                        && (1..=2).contains(&unroll) =>
                {
                    MatvecShape {
                        threads,
                        rows,
                        max_lanes,
                        unroll,
                    }
                }
                _ => MatvecShape {
                    threads: 64,
                    rows: 2,
                    max_lanes: 64,
                    unroll: 1,
                },
            }
        })
    }

    /// Lanes per row group for `cols` columns of `f` (one of [`MATVEC_FORMATS`]): the row's
    /// chunks (`CPB` per block in `vecdot.wgsl`) rounded up to a power of two, 4 to `max_lanes`.
    pub(crate) fn lanes(self, f: WeightFormat, cols: usize) -> usize {
        let per_block = match f {
            WeightFormat::Q4K => 8,
            WeightFormat::Q6K => 16,
            _ => 1,
        };
        let chunks = cols / f.block_size() * per_block;
        chunks.next_power_of_two().clamp(4, self.max_lanes)
    }

    /// Output rows of one workgroup with `lanes` lanes per group.
    pub(crate) fn rows_per_group(self, lanes: usize) -> usize {
        self.rows * self.threads / lanes
    }
}

/// The matvec's reduction over a lane group: through subgroup shuffles, then workgroup memory.
const REDUCE_SUBGROUPS: &str = "
    let span = min(sg_size, lanes);
    var v = acc;
    for (var o = 1u; o < span; o <<= 1u) { v += subgroupShuffleXor(v, o); }
    red[lid] = v;
    workgroupBarrier();
    var sum = 0.0;
    if (lane < MR) {
        for (var j = 0u; j < lanes; j += span) { sum += red[lid - lane + j][lane]; }
    }
";

/// The matvec's loop over chunks two at a time (both chunks' loads before their sums); the
/// plain loop takes the last one.
const UNROLL2: &str = "
    for (; c + lanes < chunks; c += 2u * lanes) {
        let xa = xload(x4, c);
        let xb = xload(x4, c + lanes);
        for (var r = 0u; r < MR; r++) { acc[r] += wdot(rows[r], c, xa) + wdot(rows[r], c + lanes, xb); }
    }
";

/// The matvec's reduction over a lane group by a tree in workgroup memory.
const REDUCE_TREE: &str = "
    red[lid] = acc;
    workgroupBarrier();
    for (var stride = lanes / 2u; stride > 0u; stride >>= 1u) {
        if (lane < stride) { red[lid] += red[lid + stride]; }
        workgroupBarrier();
    }
    let sum = red[lid - lane][min(lane, 3u)];
";

/// The weight formats the one-row matvec (`matvec.wgsl` + `vecdot.wgsl`) decodes; the others
/// take the matmul at one row too.
pub(crate) const MATVEC_FORMATS: [WeightFormat; 7] = [
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::Q4K,
    WeightFormat::Q6K,
];

/// Widest attention head the kernel takes (`qv` in `attention.wgsl`).
pub(crate) const MAX_HEAD_DIM: usize = 256;

/// The weight formats the matmul kernel decodes.
pub const FORMATS: [WeightFormat; 12] = [
    WeightFormat::F32,
    WeightFormat::F16,
    WeightFormat::BF16,
    WeightFormat::Q4_0,
    WeightFormat::Q4_1,
    WeightFormat::Q5_0,
    WeightFormat::Q5_1,
    WeightFormat::Q8_0,
    WeightFormat::Q4K,
    WeightFormat::Q6K,
    WeightFormat::Q8,
    WeightFormat::Q4,
];

/// One compute kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Matmul(WeightFormat),
    /// One activation row (decode) of a [`MATVEC_FORMATS`] weight.
    Matvec(WeightFormat),
    Quant,
    RmsNorm,
    Add,
    GatedAct,
    Softcap,
    AddBias,
    GatherRows,
    Rope,
    Attention,
    Copy,
    /// Encoder activation with bias or gate (`encoder.wgsl`).
    EncAct,
    EncRope,
    /// Clamp of a product's input (into a copy) or output (in place).
    EncClamp,
    /// Per-head RMS norm of queries, keys or values.
    EncHeadNorm,
    EncResidualNorm,
    /// Encoder attention for heads of at most this many values ([`enc_head_width`]).
    EncAttention(u32),
}

impl Kernel {
    /// Entry point name.
    pub(crate) fn entry(self) -> &'static str {
        match self {
            Kernel::RmsNorm => "rms_norm",
            Kernel::Add => "add",
            Kernel::GatedAct => "gated_act",
            Kernel::Softcap => "softcap",
            Kernel::AddBias => "add_bias",
            Kernel::GatherRows => "gather_rows",
            Kernel::Rope => "rope",
            Kernel::EncAct => "enc_act",
            Kernel::EncRope => "enc_rope",
            Kernel::EncClamp => "enc_clamp",
            Kernel::EncHeadNorm => "enc_head_norm",
            Kernel::EncResidualNorm => "enc_residual_norm",
            Kernel::EncAttention(_) => "enc_attention",
            Kernel::Matmul(_)
            | Kernel::Matvec(_)
            | Kernel::Quant
            | Kernel::Attention
            | Kernel::Copy => "main",
        }
    }

    /// The WGSL module: the common prelude and the kernel's file (for a matmul, with its
    /// format's `decode32` and, for split formats, the scales binding spliced in; for a matvec,
    /// its format's pieces, its shape and its reduction, through subgroups when `subgroups`).
    pub(crate) fn source(self, subgroups: bool) -> String {
        let body = match self {
            Kernel::Matmul(f) => {
                let scales = if WeightFormat::SPLIT.contains(&f) {
                    "@group(0) @binding(4) var<storage, read> S: array<u32>;"
                } else {
                    ""
                };
                let float = matches!(
                    f,
                    WeightFormat::F32 | WeightFormat::F16 | WeightFormat::BF16
                );
                let (decode, tail) = if float {
                    (format!("{}{FLOAT_DECODE}", decoder(f)), FLOAT_TAIL)
                } else {
                    (decoder(f).to_string(), "")
                };
                MATMUL
                    .replace("//SCALES", scales)
                    .replace("//WORDS", WORDS)
                    .replace("//DECODE", &decode)
                    .replace("//TAIL", tail)
            }
            Kernel::Matvec(f) => {
                // Q4_K reads its 16-byte-aligned blocks as vec4 words (its own binding 3); the
                // 32-weight formats share one chunk layout (`//@B32`).
                let words = match f {
                    WeightFormat::Q4K => String::new(),
                    WeightFormat::Q6K => WORDS.to_string(),
                    _ => format!("{WORDS}\n{}", section(VECDOT, "B32")),
                };
                let s = MatvecShape::get();
                let shape = format!(
                    "const WG: u32 = {}u;\nconst MR: u32 = {}u;",
                    s.threads, s.rows
                );
                let (args, reduce) = if subgroups {
                    (", @builtin(subgroup_size) sg_size: u32", REDUCE_SUBGROUPS)
                } else {
                    ("", REDUCE_TREE)
                };
                // (naga 30 takes subgroup builtins without `enable subgroups;`, and rejects it.)
                MATVEC
                    .replace(
                        "//FORMAT",
                        &format!("{words}\n{}", section(VECDOT, &format!("{f:?}"))),
                    )
                    .replace("//SHAPE", &shape)
                    .replace("//SUBGROUP_ARGS", args)
                    .replace("//REDUCE", reduce)
                    .replace("//UNROLL", if s.unroll == 2 { UNROLL2 } else { "" })
            }
            Kernel::Quant => QUANT.to_string(),
            Kernel::RmsNorm => NORM.to_string(),
            Kernel::Add | Kernel::GatedAct | Kernel::Softcap => ELEMENTWISE.to_string(),
            Kernel::AddBias | Kernel::GatherRows | Kernel::Rope => ROWS.to_string(),
            Kernel::Attention => ATTENTION.to_string(),
            Kernel::Copy => COPY.to_string(),
            Kernel::EncAttention(hd) => ENCODER.replace("//HD", &format!("const HD: u32 = {hd}u;")),
            Kernel::EncAct
            | Kernel::EncRope
            | Kernel::EncClamp
            | Kernel::EncHeadNorm
            | Kernel::EncResidualNorm => ENCODER.replace("//HD", "const HD: u32 = 32u;"),
        };
        format!("{COMMON}\n{body}")
    }
}

/// Format `f`'s `decode32` out of `decode.wgsl`.
fn decoder(f: WeightFormat) -> &'static str {
    section(DECODE, &format!("{f:?}"))
}

/// The block `name` of `src` (between `//@NAME` and `//@END`, a format's `{:?}` name or a
/// shared block's; empty when it has none).
fn section(src: &'static str, name: &str) -> &'static str {
    let tag = format!("//@{name}\n");
    let start = src.find(&tag).map(|i| i + tag.len());
    let body = start.and_then(|s| src[s..].find("//@END").map(|e| &src[s..s + e]));
    body.unwrap_or("")
}

/// Flat workgroups for `n` threads of 64.
fn threads(n: usize) -> u32 {
    n.div_ceil(64) as u32
}

/// A size or offset as a parameter word.
pub(crate) fn u(v: usize) -> u32 {
    v as u32
}

/// A device buffer.
pub(crate) type Buf = wgpu::Buffer;

/// Rounds `blocks` blocks of `size` activations at `src` through int8 into `dst`.
pub(crate) fn quant(a: &Buf, src: usize, dst: usize, blocks: usize, size: usize) -> Dispatch {
    Dispatch {
        kernel: Kernel::Quant,
        params: words(&[u(src), u(dst), u(blocks), u(size)]),
        bufs: vec![(1, a.clone())],
        groups: threads(blocks),
    }
}

/// RMSNorm of `rows` rows of `w` at `x` into `y` with the gain at `gain` in `c`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rms_norm(
    a: &Buf,
    c: &Buf,
    x: usize,
    y: usize,
    w: usize,
    rows: usize,
    gain: usize,
    eps: f32,
) -> Dispatch {
    Dispatch {
        kernel: Kernel::RmsNorm,
        params: words(&[u(x), u(y), u(w), u(gain), eps.to_bits(), u(rows)]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: u(rows),
    }
}

/// `a[y + i] += a[x + i]` for `i < n`.
pub(crate) fn add(a: &Buf, x: usize, y: usize, n: usize) -> Dispatch {
    Dispatch {
        kernel: Kernel::Add,
        params: words(&[u(x), u(y), u(n)]),
        bufs: vec![(1, a.clone())],
        groups: threads(n),
    }
}

/// `g = act(g) · u` over `n` values.
pub(crate) fn gated_act(a: &Buf, g: usize, up: usize, n: usize, act: GateAct) -> Dispatch {
    let act = match act {
        GateAct::Silu => 0,
        GateAct::GeluTanh => 1,
    };
    Dispatch {
        kernel: Kernel::GatedAct,
        params: words(&[u(g), u(up), u(n), act]),
        bufs: vec![(1, a.clone())],
        groups: threads(n),
    }
}

/// `x = cap · tanh(x / cap)` over `n` values.
pub(crate) fn softcap(a: &Buf, x: usize, n: usize, cap: f32) -> Dispatch {
    Dispatch {
        kernel: Kernel::Softcap,
        params: words(&[u(x), 0, u(n), cap.to_bits()]),
        bufs: vec![(1, a.clone())],
        groups: threads(n),
    }
}

/// Adds the bias at `b` in `c` to `rows` rows of `w` at `y`.
pub(crate) fn add_bias(a: &Buf, c: &Buf, y: usize, b: usize, w: usize, rows: usize) -> Dispatch {
    Dispatch {
        kernel: Kernel::AddBias,
        params: words(&[u(y), u(b), u(w), u(rows)]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(w * rows),
    }
}

/// Rows `idx` (u32 bits at `idx` in `c`, `rows` of them) of width `w` at `src` into `dst`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gather_rows(
    a: &Buf,
    c: &Buf,
    src: usize,
    dst: usize,
    w: usize,
    rows: usize,
    idx: usize,
) -> Dispatch {
    Dispatch {
        kernel: Kernel::GatherRows,
        params: words(&[u(src), u(dst), u(w), u(rows), u(idx)]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(w * rows),
    }
}

/// Where a RoPE's tables lie in the constants and how it pairs dimensions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RopeAt {
    pub cos: usize,
    pub sin: usize,
    pub half: usize,
    pub interleaved: bool,
}

/// Rotates `t` rows of `heads` heads of `head_dim` at `x`.
pub(crate) fn rope(
    a: &Buf,
    c: &Buf,
    x: usize,
    t: usize,
    heads: usize,
    head_dim: usize,
    r: RopeAt,
) -> Dispatch {
    Dispatch {
        kernel: Kernel::Rope,
        params: words(&[
            u(x),
            u(t),
            u(heads),
            u(head_dim),
            u(r.half),
            u32::from(r.interleaved),
            u(r.cos),
            u(r.sin),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(t * heads * r.half),
    }
}

/// Attention of the queries at `q` (in `a`) over keys at `k` and values at `v` (in `kv`,
/// rows of `n_kv_heads · head_dim`) into `out` (in `a`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    a: &Buf,
    kv: &Buf,
    q: usize,
    out: usize,
    k: usize,
    v: usize,
    g: &oxinfer::backend::AttentionGeom,
) -> Dispatch {
    let s = &g.shape;
    Dispatch {
        kernel: Kernel::Attention,
        params: words(&[
            u(q),
            u(out),
            u(k),
            u(v),
            u(g.t),
            u(g.pos0),
            u(s.n_heads),
            u(s.n_kv_heads),
            u(s.head_dim),
            s.scale.to_bits(),
            u(s.window.unwrap_or(0)),
            s.softcap.unwrap_or(0.0).to_bits(),
        ]),
        bufs: vec![(1, a.clone()), (2, kv.clone())],
        groups: u(g.t * s.n_heads),
    }
}

/// `dst[to + i] = a[from + i]` for `i < n`.
pub(crate) fn copy(a: &Buf, from: usize, dst: &Buf, to: usize, n: usize) -> Dispatch {
    Dispatch {
        kernel: Kernel::Copy,
        params: words(&[u(from), u(to), u(n)]),
        bufs: vec![(1, a.clone()), (2, dst.clone())],
        groups: threads(n),
    }
}

/// Widest row the encoder's residual LayerNorm takes (`NT · PER` in `encoder.wgsl`).
pub(crate) const ENC_MAX_DIM: usize = 4096;

/// Queries per workgroup of the encoder attention (its workgroup size).
pub(crate) const ENC_QUERY_BLOCK: usize = 64;

/// Workgroup memory the encoder attention takes (its key and value tiles), bytes.
pub(crate) const ENC_ATTENTION_SHARED: u32 = 2 * 2048 * 4;

/// The head width the encoder attention kernel for heads of `hd` is compiled for (its private
/// arrays' length: 32, 64, 128 or 256); `None` above 256.
pub(crate) fn enc_head_width(hd: usize) -> Option<u32> {
    [32u32, 64, 128, 256]
        .into_iter()
        .find(|&w| hd <= w as usize)
}

/// Loop iterations one invocation of the encoder attention runs at most for heads of `hd` over
/// `keys` keys, counting every loop over a head as not unrolled (`enc_attention` in
/// `encoder.wgsl`): the query load and the output, then per tile of keys its load and rescale,
/// per key its two passes over the head. llvmpipe ends an invocation past 65,535 in all
/// (`LP_MAX_TGSI_LOOP_ITERATIONS`), so longer sequences are declined there.
pub(crate) fn enc_attention_loops(hd: usize, keys: usize) -> usize {
    let w = enc_head_width(hd).unwrap_or(256) as usize;
    let tile = 2048 / w;
    w / 4 + hd + keys.div_ceil(tile) * (8 + w / 16) + keys * (2 + w / 8)
}

/// The code of an encoder activation in `encoder.wgsl` (`enc_act_value`; 4: none).
fn enc_act_code(act: Option<EncoderAct>) -> u32 {
    match act {
        Some(EncoderAct::GeluErf) => 0,
        Some(EncoderAct::GeluTanh) => 1,
        Some(EncoderAct::Relu) => 2,
        Some(EncoderAct::Silu) => 3,
        None => 4,
    }
}

/// `y = act(y + bias)` over `n` values at `y` in rows of `w` (the bias at `bias` in `c`), times
/// the values at `up` when given (a gated MLP's `act(gate) · up`); `act` `None`: no activation.
#[allow(clippy::too_many_arguments)]
pub(crate) fn enc_act(
    a: &Buf,
    c: &Buf,
    y: usize,
    n: usize,
    w: usize,
    bias: Option<usize>,
    act: Option<EncoderAct>,
    up: Option<usize>,
) -> Dispatch {
    let flags = u32::from(bias.is_some()) | (u32::from(up.is_some()) << 1);
    Dispatch {
        kernel: Kernel::EncAct,
        params: words(&[
            u(y),
            u(bias.unwrap_or(0)),
            u(w.max(1)),
            u(n),
            flags,
            enc_act_code(act),
            u(up.unwrap_or(0)),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(n),
    }
}

/// `dst = clamp(src, lo, hi)` over `rows` rows of `w` values (`src` rows `ld_src` apart, `dst`
/// rows `ld_dst` apart; `dst == src` in place).
pub(crate) fn enc_clamp(
    a: &Buf,
    (src, ld_src): (usize, usize),
    (dst, ld_dst): (usize, usize),
    (rows, w): (usize, usize),
    [lo, hi]: [f32; 2],
) -> Dispatch {
    Dispatch {
        kernel: Kernel::EncClamp,
        params: words(&[
            u(src),
            u(dst),
            u(rows),
            u(w),
            u(ld_src),
            u(ld_dst),
            lo.to_bits(),
            hi.to_bits(),
        ]),
        bufs: vec![(1, a.clone())],
        groups: threads(rows * w),
    }
}

/// Each of `heads` heads of `hd` values of `rows` rows at `x` (rows `ld` apart) normalized in
/// place by the RMSNorm `n` (gains of `hd` in `c`).
pub(crate) fn enc_head_norm(
    a: &Buf,
    c: &Buf,
    (x, ld, rows): (usize, usize, usize),
    (heads, hd): (usize, usize),
    n: NormAt,
) -> Dispatch {
    Dispatch {
        kernel: Kernel::EncHeadNorm,
        params: words(&[
            u(x),
            u(rows),
            u(ld),
            u(heads),
            u(hd),
            u(n.gain),
            n.eps.to_bits(),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(rows * heads),
    }
}

/// Rotates the queries and keys of `t` rows of `qkv` (rows `ld` apart, `heads` query heads of
/// `head_dim` then `kv_heads` key heads), row `r` by row `rows[r]` (u32 bits at `rows` in `c`)
/// of the tables `r`, their pairs in `sections` blocks per head
/// ([`oxinfer::plan::encoder_tables::RopeTables::sections`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn enc_rope(
    a: &Buf,
    c: &Buf,
    qkv: usize,
    (t, ld): (usize, usize),
    (heads, kv_heads): (usize, usize),
    head_dim: usize,
    (r, sections): (RopeAt, usize),
    rows: usize,
) -> Dispatch {
    Dispatch {
        kernel: Kernel::EncRope,
        params: words(&[
            u(qkv),
            u(t),
            u(heads),
            u(head_dim),
            u(r.half),
            u32::from(r.interleaved),
            u(r.cos),
            u(r.sin),
            u(rows),
            u(ld),
            u(kv_heads),
            u(sections.max(1)),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: threads(t * (heads + kv_heads) * r.half),
    }
}

/// A norm's gain and bias offsets in the constants, its epsilon and kind.
pub(crate) use oxinfer::plan::encoder_tables::NormAt;

/// `out = norm(x + (y + y_bias))` over `rows` rows of `dim` (`y` `None`: `out = norm(x)`), with
/// `x` keeping the sum when `out` is elsewhere (pre-norm) or becoming the normalized rows when
/// `out == x` (post-norm); `n` `None`: no norm, `out = x + (y + y_bias)`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn enc_residual_norm(
    a: &Buf,
    c: &Buf,
    x: usize,
    y: Option<(usize, Option<usize>)>,
    n: Option<NormAt>,
    out: usize,
    dim: usize,
    rows: usize,
) -> Dispatch {
    let (y_at, yb) = y.unwrap_or((0, None));
    let rms = n.is_some_and(|n| n.rms);
    let flags = u32::from(y.is_some())
        | (u32::from(yb.is_some()) << 1)
        | (u32::from(rms) << 2)
        | (u32::from(n.is_none()) << 3);
    let n = n.unwrap_or(NormAt {
        gain: 0,
        bias: None,
        eps: 0.0,
        rms: true,
    });
    Dispatch {
        kernel: Kernel::EncResidualNorm,
        params: words(&[
            u(x),
            u(y_at),
            u(yb.unwrap_or(0)),
            u(n.gain),
            u(n.bias.unwrap_or(0)),
            u(dim),
            n.eps.to_bits(),
            u(out),
            flags,
            u(rows),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: u(rows),
    }
}

/// Attention of every sequence with itself: `qkv` rows of `(heads + 2 kv_heads) · head_dim`
/// (queries, keys, values) into `out` (`[T, heads · head_dim]`), over the `blocks` query
/// blocks at `at` in `c`
/// (`(first row, length, first query)` of [`ENC_QUERY_BLOCK`] queries of one sequence, as u32
/// bits).
pub(crate) fn enc_attention(
    a: &Buf,
    c: &Buf,
    (qkv, out): (usize, usize),
    h: EncoderHeads,
    at: usize,
    blocks: usize,
) -> Dispatch {
    let width = enc_head_width(h.head_dim).unwrap_or(256);
    Dispatch {
        kernel: Kernel::EncAttention(width),
        params: words(&[
            u(qkv),
            u(out),
            u(h.n_heads),
            u(h.head_dim),
            u((h.n_heads + 2 * h.n_kv_heads) * h.head_dim),
            h.scale.to_bits(),
            u(h.window.map_or(0, |w| w + 1)),
            u(at),
            u(blocks),
            u(h.n_kv_heads),
        ]),
        bufs: vec![(1, a.clone()), (5, c.clone())],
        groups: u(blocks * h.n_heads),
    }
}
