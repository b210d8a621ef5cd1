//! One description of a bidirectional encoder (post-norm: BERT, XLM-RoBERTa, NomicBERT;
//! pre-norm: ModernBERT, Qwen 3.5's vision tower; pre-norm with sandwich norms, per-head query /
//! key / value norms, grouped-query attention and clamped projections: Gemma 4's vision tower),
//! executed by every device.
//!
//! The architecture ([`crate::arch::bert::Bert`], [`crate::arch::modernbert::ModernBert`],
//! [`crate::arch::qwen_vision::tower::VisionTower`], [`crate::arch::gemma::vision::VisionTower`])
//! embeds (and normalizes) the tokens on the host, then describes its blocks once as an
//! [`EncoderPlan`]; [`run`] offers the plan whole to the
//! installed backend ([`crate::backend::Backend::run_encoder`]: the hidden state stays on the
//! device for every layer) and runs it on the CPU ([`run_cpu`]) when the backend declines it.
//!
//! A batch is several sequences concatenated without padding (`[Σ lens, dim]`, sequence `i`'s
//! rows after those of `0 .. i`): every projection runs once over all of them and attention runs
//! per sequence, so padded and unpadded batches give the same rows by construction.

use crate::backend;
use crate::error::{Error, Result};
use crate::nn::encoder_act::EncoderAct;
use crate::nn::encoder_attention::{encoder_attention, EncoderHeads};
use crate::nn::encoder_linear::EncoderLinear;
use crate::nn::{encoder_math, LayerNorm, RmsNorm, Rope, RopeRows};

/// One block. Post-norm ([`NormOrder::Post`]): `x = attn_norm(x + o(attention(q(x), k(x),
/// v(x))))`, then `x = ffn_norm(x + mlp(x))`. Pre-norm ([`NormOrder::Pre`]): `x += o(attention(
/// q(h), k(h), v(h)))` with `h = attn_norm(x)`, then `x += mlp(ffn_norm(x))`. The MLP is
/// `down(act(up(·)))`, or with a gate `down(act(gate(·)) · up(·))`. Every projection carries its
/// own bias (or none) and clamps (or none: [`EncoderLinear::with_clamps`]). [`ExtraNorms`] adds
/// per-head norms of the queries, keys and values (before the rotation) and norms of each
/// sublayer's output before its residual add (Gemma's sandwich norms).
pub struct EncoderLayer<'a> {
    /// Query projection `[n_heads · head_dim, dim]`.
    pub q: &'a EncoderLinear,
    /// Key and value projections, `[n_kv_heads · head_dim, dim]` each.
    pub k: &'a EncoderLinear,
    pub v: &'a EncoderLinear,
    /// Attention output projection `[dim, n_heads · head_dim]`.
    pub o: &'a EncoderLinear,
    /// Post-norm: the norm after the attention's residual add (required). Pre-norm: the norm
    /// of the attention's input (`None`: none, ModernBERT's first block).
    pub attn_norm: Option<Norm<'a>>,
    /// Local attention: a query sees only the keys of its sequence at distance `≤ window`;
    /// `None`: all of them.
    pub window: Option<usize>,
    /// Rotary positions of this layer's queries and keys, per sequence of the batch
    /// ([`RopeOf`]: NomicBERT, ModernBERT, a vision tower's patch grid). `None`: positions are
    /// part of the embedding.
    pub rope_of: Option<RopeOf<'a>>,
    /// The gate of a gated MLP `[ffn, dim]` (NomicBERT's SwiGLU); `None`: `act(up(x))`.
    pub gate: Option<&'a EncoderLinear>,
    /// `[ffn, dim]`.
    pub up: &'a EncoderLinear,
    /// `[dim, ffn]`.
    pub down: &'a EncoderLinear,
    /// The norm after the MLP's residual add (post-norm), or of the MLP's input (pre-norm).
    pub ffn_norm: Norm<'a>,
    /// Per-head and sublayer-output norms (all `None` but in Gemma-style blocks).
    pub extra_norms: ExtraNorms<'a>,
}

/// A block's normalization of rows of the hidden state.
#[derive(Clone, Copy)]
pub enum Norm<'a> {
    /// `(v − mean) / √(var + eps) · w + b`.
    Layer(&'a LayerNorm),
    /// `v / √(mean(v²) + eps) · w` (the gain as stored in [`RmsNorm::weight`], its `1 +`
    /// already added for zero-centred variants).
    Rms(&'a RmsNorm),
}

impl<'a> From<&'a LayerNorm> for Norm<'a> {
    fn from(n: &'a LayerNorm) -> Self {
        Norm::Layer(n)
    }
}

impl<'a> From<&'a RmsNorm> for Norm<'a> {
    fn from(n: &'a RmsNorm) -> Self {
        Norm::Rms(n)
    }
}

impl Norm<'_> {
    /// Width of the rows it normalizes.
    pub fn width(self) -> usize {
        match self {
            Norm::Layer(n) => n.weight.len(),
            Norm::Rms(n) => n.weight.len(),
        }
    }

    /// Every row of `x` normalized in place, parts of rows in parallel (LayerNorm with its
    /// mean and variance summed in f32 over 8 lanes, RMSNorm as [`RmsNorm::forward_inplace`]).
    pub fn apply_rows(self, x: &mut [f32]) {
        match self {
            Norm::Layer(n) => norm_rows(x, n),
            Norm::Rms(n) => n.forward_inplace(x),
        }
    }
}

/// The norms of a Gemma-style block beyond [`EncoderLayer::attn_norm`] and
/// [`EncoderLayer::ffn_norm`] (`Default`: none). The per-head norms are RMS norms of
/// `head_dim` applied to each head of the queries, keys and values after their projections
/// (and clamps) and before the rotation (`v`'s may be unscaled: a gain of ones); `post_attn`
/// normalizes the attention's output (after `o`) and `post_ffn` the MLP's (after `down`), each
/// before its residual add, in either [`NormOrder`].
#[derive(Clone, Copy, Default)]
pub struct ExtraNorms<'a> {
    pub q: Option<&'a RmsNorm>,
    pub k: Option<&'a RmsNorm>,
    pub v: Option<&'a RmsNorm>,
    pub post_attn: Option<Norm<'a>>,
    pub post_ffn: Option<Norm<'a>>,
}

/// The rotary positions of one layer's queries and keys over a batch (an argument of
/// [`EncoderLayer::rope_of`]).
#[derive(Clone, Copy)]
pub enum RopeOf<'a> {
    /// Token `p` of each sequence at position `p`, a sequence of `n` tokens rotated by `of(n)`
    /// (one rotation per length: dynamic NTK scaling gives long sequences their own base).
    Positions(&'a dyn Fn(usize) -> &'a Rope),
    /// Rows given token by token: sequence `i` of the batch (of `n` tokens) by `rows[i]`, a
    /// table of exactly `n` rows (a vision tower's 2-D patch grid, [`RopeRows::axial_2d`]).
    Rows(&'a [RopeRows]),
}

/// The rotation of one sequence of a batch in one layer (what [`RopeOf`] gives it).
#[derive(Clone, Copy)]
pub enum SeqRope<'a> {
    /// Token `p` at position `p` of this rotation.
    Positions(&'a Rope),
    /// Token `p` by row `p` of these rows.
    Rows(&'a RopeRows),
}

impl<'a> RopeOf<'a> {
    /// The rotation of sequence `i` of the batch, of `n` tokens.
    ///
    /// # Panics
    /// With [`RopeOf::Rows`], if there is no sequence `i` (see [`Self::check`]).
    pub fn of_sequence(self, i: usize, n: usize) -> SeqRope<'a> {
        match self {
            RopeOf::Positions(of) => SeqRope::Positions(of(n)),
            RopeOf::Rows(rows) => SeqRope::Rows(&rows[i]),
        }
    }

    /// The same rotations for the sequences `seqs` of the batch alone (a device pass over part
    /// of a batch).
    ///
    /// # Panics
    /// With [`RopeOf::Rows`], if `seqs` reaches past its tables.
    pub fn of_sequences(self, seqs: std::ops::Range<usize>) -> Self {
        match self {
            RopeOf::Positions(_) => self,
            RopeOf::Rows(rows) => RopeOf::Rows(&rows[seqs]),
        }
    }

    /// Whether every sequence of lengths `lens` has its rotation: with [`RopeOf::Rows`], one
    /// table per sequence of exactly its length.
    pub fn check(self, lens: &[usize]) -> std::result::Result<(), String> {
        let RopeOf::Rows(rows) = self else {
            return Ok(());
        };
        if rows.len() != lens.len() {
            return Err(format!(
                "{} tables of rotary rows for a batch of {} sequences",
                rows.len(),
                lens.len()
            ));
        }
        match lens.iter().zip(rows).position(|(&n, r)| r.tokens() != n) {
            Some(i) => Err(format!(
                "sequence {i} has {} tokens and {} rotary rows",
                lens[i],
                rows[i].tokens()
            )),
            None => Ok(()),
        }
    }
}

impl SeqRope<'_> {
    /// Rotated dimensions per head.
    pub fn dim(self) -> usize {
        match self {
            SeqRope::Positions(r) => r.dim(),
            SeqRope::Rows(r) => 2 * r.half(),
        }
    }

    /// Whether pairs are interleaved `(2j, 2j + 1)` (else in `rotate_half` sections:
    /// [`Self::sections`]).
    pub fn interleaved(self) -> bool {
        match self {
            SeqRope::Positions(r) => r.interleaved(),
            SeqRope::Rows(_) => false,
        }
    }

    /// Independent `rotate_half` sections of the rotated dimensions (not interleaved): with `s`
    /// sections of `w = dim / (2 s)` angles, angle `j` rotates the pair `(2 w ⌊j / w⌋ + j mod w,
    /// that + w)`; one section is the usual `(j, j + dim / 2)` ([`RopeRows::sections`]).
    pub fn sections(self) -> usize {
        match self {
            SeqRope::Positions(_) => 1,
            SeqRope::Rows(r) => r.sections(),
        }
    }

    /// Whether `self` and `other` are the same rotation (the same object).
    pub fn same(self, other: SeqRope) -> bool {
        match (self, other) {
            (SeqRope::Positions(a), SeqRope::Positions(b)) => std::ptr::eq(a, b),
            (SeqRope::Rows(a), SeqRope::Rows(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }

    /// The cosines and sines of tokens `0 .. n` into `cos` / `sin` (`[n, dim / 2]` each; with
    /// rows, `n ≤` their tokens).
    pub fn tables(self, n: usize, cos: &mut [f32], sin: &mut [f32]) {
        match self {
            SeqRope::Positions(r) => r.tables(0, n, cos, sin),
            SeqRope::Rows(r) => {
                let k = n * r.half();
                cos[..k].copy_from_slice(&r.cos()[..k]);
                sin[..k].copy_from_slice(&r.sin()[..k]);
            }
        }
    }

    /// Rotates `m` (`[n, heads · head_dim]`, one sequence's queries or keys) in place.
    pub fn apply(self, m: &mut [f32], n: usize, heads: usize, head_dim: usize) {
        match self {
            SeqRope::Positions(r) => r.apply(m, n, heads, head_dim, 0),
            SeqRope::Rows(r) => r.apply(m, n, heads, head_dim),
        }
    }
}

/// Where a block's norms sit.
#[derive(Clone, Copy)]
pub enum NormOrder<'a> {
    /// After each residual add (BERT); the plan's output is the last block's.
    Post,
    /// On each sublayer's input, the residual stream itself never normalized until
    /// `final_norm` after the last block (ModernBERT's final norm; Qwen 3.5's vision tower's
    /// merger norm, per patch; `None`: the stream as it is, Gemma 4's vision tower).
    Pre { final_norm: Option<Norm<'a>> },
}

/// A whole encoder after its embeddings: the blocks, their attention heads and activation.
pub struct EncoderPlan<'a> {
    pub layers: Vec<EncoderLayer<'a>>,
    /// Where the norms sit.
    pub order: NormOrder<'a>,
    /// Heads of every layer's attention (the same for all layers; their `window` is ignored:
    /// each layer has its own, [`EncoderLayer::window`]). `n_heads · head_dim` need not be
    /// `dim`.
    pub heads: EncoderHeads,
    /// The MLP's activation.
    pub act: EncoderAct,
    /// Width of the hidden state.
    pub dim: usize,
}

impl EncoderPlan<'_> {
    /// Whether a block lacks the attention norm its order needs: any post-norm block, or a
    /// pre-norm block past the first (only the first may have none).
    pub fn lacks_attention_norm(&self) -> bool {
        let skip = match self.order {
            NormOrder::Post => 0,
            NormOrder::Pre { .. } => 1,
        };
        self.layers.iter().skip(skip).any(|l| l.attn_norm.is_none())
    }

    /// Whether `x` holds the rows of sequences of lengths `lens` (`[Σ lens, dim]`), the
    /// layers' projections and norms chain ([`Self::check_shapes`]) and every layer's rotation
    /// fits the sequences ([`RopeOf::check`]); `Err` says what does not.
    pub fn check(&self, x: &[f32], lens: &[usize]) -> std::result::Result<(), String> {
        let t: usize = lens.iter().sum();
        if x.len() != t * self.dim {
            return Err(format!(
                "{} values for {t} rows of width {}",
                x.len(),
                self.dim
            ));
        }
        self.check_shapes()?;
        self.layers
            .iter()
            .filter_map(|l| l.rope_of)
            .try_for_each(|r| r.check(lens))
    }

    /// Whether the heads group (`n_kv_heads` dividing `n_heads`), every projection has the
    /// shape its place needs and every norm its width: `Err` names the first that does not.
    pub fn check_shapes(&self) -> std::result::Result<(), String> {
        let (h, dim) = (&self.heads, self.dim);
        if h.n_heads == 0 || h.n_kv_heads == 0 || !h.n_heads.is_multiple_of(h.n_kv_heads) {
            return Err(format!(
                "{} query heads over {} key/value heads",
                h.n_heads, h.n_kv_heads
            ));
        }
        let (qw, kvw) = (h.n_heads * h.head_dim, h.n_kv_heads * h.head_dim);
        for (i, l) in self.layers.iter().enumerate() {
            let ffn = l.up.n_out();
            let shapes = [
                ("q", Some(l.q), qw, dim),
                ("k", Some(l.k), kvw, dim),
                ("v", Some(l.v), kvw, dim),
                ("o", Some(l.o), dim, qw),
                ("gate", l.gate, ffn, dim),
                ("up", Some(l.up), ffn, dim),
                ("down", Some(l.down), dim, ffn),
            ];
            for (what, p, rows, cols) in shapes {
                let Some(p) = p else { continue };
                let m = p.linear();
                if (m.n_out, m.n_in) != (rows, cols) {
                    return Err(format!(
                        "layer {i}: {what} is [{}, {}], not [{rows}, {cols}]",
                        m.n_out, m.n_in
                    ));
                }
            }
            let e = &l.extra_norms;
            let heads = [e.q, e.k, e.v].into_iter().flatten();
            let rows = [l.attn_norm, e.post_attn, Some(l.ffn_norm), e.post_ffn];
            let widths = heads
                .map(|n| (n.weight.len(), h.head_dim))
                .chain(rows.into_iter().flatten().map(|n| (n.width(), dim)));
            if let Some((w, want)) = widths.into_iter().find(|(w, want)| w != want) {
                return Err(format!("layer {i}: a norm of {w} values, not {want}"));
            }
        }
        match self.order {
            NormOrder::Pre {
                final_norm: Some(n),
            } if n.width() != dim => Err(format!("a final norm of {} values", n.width())),
            _ => Ok(()),
        }
    }

    /// The heads of layer `l`'s attention (with its window).
    pub fn heads_of(&self, l: &EncoderLayer) -> EncoderHeads {
        EncoderHeads {
            window: l.window,
            ..self.heads
        }
    }
}

/// The last hidden states of the sequences of lengths `lens` whose embedded, normalized rows
/// are `x` (`[Σ lens, dim]`): on the installed backend when it runs the whole plan, else
/// whole on the CPU (op by op, each product's activations crossing the bus and attention on
/// the host, all-MiniLM-L6-v2 ran 6–17× slower on an H200 than on its host's cores:
/// docs/embeddings.md). Same layout out.
/// `Err` when the rows are not `[Σ lens, dim]` or a layer's rotation does not fit the batch
/// ([`RopeOf::check`]).
pub fn run(plan: &EncoderPlan, x: Vec<f32>, lens: &[usize]) -> Result<Vec<f32>> {
    plan.check(&x, lens).map_err(Error::Request)?;
    if let Some(b) = backend::active() {
        let mut out = vec![0f32; x.len()];
        if b.run_encoder(plan, &x, lens, &mut out) {
            return Ok(out);
        }
        let _host = backend::cpu_only_here();
        return Ok(run_cpu(plan, x, lens));
    }
    Ok(run_cpu(plan, x, lens))
}

/// [`run`] on the CPU (single projections still go to an installed backend that wants them,
/// unless the caller holds [`backend::cpu_only_here`]).
///
/// # Panics
/// If a post-norm layer has no `attn_norm`, or what [`EncoderPlan::check`] refuses.
pub fn run_cpu(plan: &EncoderPlan, mut x: Vec<f32>, lens: &[usize]) -> Vec<f32> {
    let total: usize = lens.iter().sum();
    let pre = matches!(plan.order, NormOrder::Pre { .. });
    for b in &plan.layers {
        let heads = plan.heads_of(b);
        let extra = &b.extra_norms;
        let input = match pre {
            false => None,
            true => b.attn_norm.map(|n| normed(&x, n)),
        };
        let h = input.as_deref().unwrap_or(&x);
        let mut qkv = EncoderLinear::forward_shared(&[b.q, b.k, b.v], h, total);
        // Each norm has `head_dim` values: every head of every row normalized alone.
        for (m, n) in qkv.iter_mut().zip([extra.q, extra.k, extra.v]) {
            if let Some(n) = n {
                n.forward_inplace(m);
            }
        }
        if let Some(rope_of) = b.rope_of {
            let [q, k, _] = &mut qkv[..] else {
                unreachable!("three projections")
            };
            rotate_each_sequence(rope_of, q, lens, heads.n_heads, heads.head_dim);
            rotate_each_sequence(rope_of, k, lens, heads.n_kv_heads, heads.head_dim);
        }
        let mixed = encoder_attention(&qkv[0], &qkv[1], &qkv[2], lens, &heads);
        let mut y = b.o.forward(&mixed, total);
        if let Some(n) = extra.post_attn {
            n.apply_rows(&mut y);
        }
        match pre {
            false => {
                let norm = b
                    .attn_norm
                    .expect("a post-norm block has an attention norm");
                residual_norm(&mut x, &y, norm);
            }
            true => add(&mut x, &y),
        }
        let input = pre.then(|| normed(&x, b.ffn_norm));
        let h = input.as_deref().unwrap_or(&x);
        let act = match b.gate {
            None => {
                let act = plan.act;
                b.up.forward_then(h, total, &|v| act.apply_slice(v))
            }
            Some(gate) => {
                let gu = EncoderLinear::forward_shared(&[gate, b.up], h, total);
                let [mut g, u]: [Vec<f32>; 2] = gu.try_into().expect("two projections");
                plan.act.apply_all(&mut g, Some(&u[..]));
                g
            }
        };
        let mut y = b.down.forward(&act, total);
        if let Some(n) = extra.post_ffn {
            n.apply_rows(&mut y);
        }
        match pre {
            false => residual_norm(&mut x, &y, b.ffn_norm),
            true => add(&mut x, &y),
        }
    }
    if let NormOrder::Pre {
        final_norm: Some(n),
    } = plan.order
    {
        n.apply_rows(&mut x);
    }
    x
}

/// Rotates `m` (`[Σ lens, heads · head_dim]`, sequences concatenated), each sequence by its
/// rotation of `rope_of`.
fn rotate_each_sequence(
    rope_of: RopeOf,
    m: &mut [f32],
    lens: &[usize],
    heads: usize,
    head_dim: usize,
) {
    let width = heads * head_dim;
    let mut first = 0;
    for (i, &n) in lens.iter().enumerate() {
        let rows = &mut m[first * width..(first + n) * width];
        rope_of.of_sequence(i, n).apply(rows, n, heads, head_dim);
        first += n;
    }
}

/// Rows per parallel part of the residual and norm loops.
const ROWS_PER_PART: usize = 32;

/// `x ← norm(x + y)` (post-norm residual), parts of rows in parallel, each row with
/// [`layer_norm_lanes`] (an RMSNorm: the sum, then [`Norm::apply_rows`]).
fn residual_norm(x: &mut [f32], y: &[f32], norm: Norm) {
    let norm = match norm {
        Norm::Layer(n) => n,
        Norm::Rms(_) => {
            add(x, y);
            return norm.apply_rows(x);
        }
    };
    let dim = norm.weight.len().max(1);
    let part = ROWS_PER_PART * dim;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(part).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, xs| {
        xs.iter_mut().zip(&y[i * part..]).for_each(|(a, b)| *a += b);
        for row in xs.chunks_exact_mut(dim) {
            layer_norm_lanes(row, &norm.weight, &norm.bias, norm.eps);
        }
    });
}

/// `x ← x + y`, parts in parallel.
fn add(x: &mut [f32], y: &[f32]) {
    const PART: usize = 1 << 14;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(PART).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |i, xs| {
        xs.iter_mut().zip(&y[i * PART..]).for_each(|(a, b)| *a += b);
    });
}

/// Every row of `x` (rows of `norm`'s width) normalized in place, parts of rows in parallel.
fn norm_rows(x: &mut [f32], norm: &LayerNorm) {
    let dim = norm.weight.len().max(1);
    let part = ROWS_PER_PART * dim;
    let mut parts: Vec<&mut [f32]> = x.chunks_mut(part).collect();
    oxinfer_kernels::pool::for_each_mut(&mut parts, |_, xs| {
        for row in xs.chunks_exact_mut(dim) {
            layer_norm_lanes(row, &norm.weight, &norm.bias, norm.eps);
        }
    });
}

/// `norm(x)` as a new buffer.
fn normed(x: &[f32], norm: Norm) -> Vec<f32> {
    let mut h = x.to_vec();
    norm.apply_rows(&mut h);
    h
}

/// LayerNorm of one row in place, `(v − mean) / √(var + eps) · w + b`, with the mean and the
/// (two-pass) variance summed in f32 over 8 lanes ([`encoder_math::lanes_fold`]), as torch's
/// f32 LayerNorm sums in f32, so the loops vectorize (the f64 sums of
/// `nn::layer_norm::layer_norm_row` run one value at a time: 4 % of an encoder's time).
fn layer_norm_lanes(row: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    let n = row.len() as f32;
    let mean = encoder_math::lanes_fold(row, 0.0, |a, v| a + v) / n;
    row.iter_mut().for_each(|v| *v -= mean);
    let var = encoder_math::lanes_sum_of(row, |v| v * v) / n;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &g), &bias) in row.iter_mut().zip(w).zip(b) {
        *v = *v * inv * g + bias;
    }
}
