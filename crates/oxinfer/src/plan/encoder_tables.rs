//! What a device executor of an [`EncoderPlan`] uploads besides the weights, made once on the
//! host for every backend: the layers' biases and norm parameters packed into one vector
//! ([`pack_params`]), and the rotary tables of a batch ([`rope_tables`]).

#[cfg(doc)]
use super::encoder::EncoderLayer;
use super::encoder::{EncoderPlan, Norm, NormOrder, RopeOf, SeqRope};
use crate::nn::encoder_linear::EncoderLinear;

/// A norm's gain and bias offsets in the pack (f32 values), its epsilon and kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormAt {
    pub gain: usize,
    /// `None`: an RMSNorm (no bias).
    pub bias: Option<usize>,
    pub eps: f32,
    /// An RMSNorm (`v / √(mean(v²) + eps) · gain`), else a LayerNorm.
    pub rms: bool,
}

/// Offsets into the pack of one layer's biases and norms (`None`: none).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerParams {
    /// q, k, v biases side by side `[q width + 2 · kv width]` (zeros for a missing one; `None`
    /// when all are).
    pub qkv_bias: Option<usize>,
    pub o_bias: Option<usize>,
    /// `None`: a pre-norm block without an attention norm.
    pub attn_norm: Option<NormAt>,
    pub gate_bias: Option<usize>,
    pub up_bias: Option<usize>,
    pub down_bias: Option<usize>,
    pub ffn_norm: NormAt,
    /// The per-head RMS norms of the queries, keys and values (`head_dim` gains each).
    pub q_norm: Option<NormAt>,
    pub k_norm: Option<NormAt>,
    pub v_norm: Option<NormAt>,
    /// The norms of the attention's and the MLP's outputs before their residual adds.
    pub post_attn_norm: Option<NormAt>,
    pub post_ffn_norm: Option<NormAt>,
}

/// The packed parameters of a plan: `pack` (every vector starting at a multiple of the
/// alignment asked for), each layer's offsets and the final norm's (pre-norm plans).
#[derive(Clone, Debug, PartialEq)]
pub struct EncoderParams {
    pub pack: Vec<f32>,
    pub layers: Vec<LayerParams>,
    pub final_norm: Option<NormAt>,
}

/// Every layer's biases and norm parameters of `plan` in one vector, each starting at a
/// multiple of `align` values (≥ 1: a device's offset alignment for bindings or loads).
pub fn pack_params(plan: &EncoderPlan, align: usize) -> EncoderParams {
    let mut pack: Vec<f32> = Vec::new();
    let align = align.max(1);
    let mut push = |v: &[f32]| {
        let at = pack.len();
        pack.extend_from_slice(v);
        pack.resize(pack.len().next_multiple_of(align), 0.0);
        at
    };
    let norm = |push: &mut dyn FnMut(&[f32]) -> usize, n: Norm| match n {
        Norm::Layer(n) => NormAt {
            gain: push(&n.weight),
            bias: Some(push(&n.bias)),
            eps: n.eps,
            rms: false,
        },
        Norm::Rms(n) => NormAt {
            gain: push(&n.weight),
            bias: None,
            eps: n.eps,
            rms: true,
        },
    };
    let mut layers = Vec::with_capacity(plan.layers.len());
    for l in &plan.layers {
        let qkv = [l.q, l.k, l.v];
        let qkv_bias = qkv.iter().any(|p| p.linear().bias().is_some()).then(|| {
            let mut v = Vec::new();
            for p in qkv {
                match p.linear().bias() {
                    Some(b) => v.extend_from_slice(b),
                    None => v.resize(v.len() + p.n_out(), 0.0),
                }
            }
            push(&v)
        });
        let mut bias = |p: Option<&EncoderLinear>| p.and_then(|p| p.linear().bias()).map(&mut push);
        let (o_bias, gate_bias, up_bias, down_bias) = (
            bias(Some(l.o)),
            bias(l.gate),
            bias(Some(l.up)),
            bias(Some(l.down)),
        );
        let attn_norm = l.attn_norm.map(|n| norm(&mut push, n));
        let ffn_norm = norm(&mut push, l.ffn_norm);
        let e = &l.extra_norms;
        let mut opt = |n: Option<Norm>| n.map(|n| norm(&mut push, n));
        let [q_norm, k_norm, v_norm] = [e.q, e.k, e.v].map(|n| opt(n.map(Norm::Rms)));
        let (post_attn_norm, post_ffn_norm) = (opt(e.post_attn), opt(e.post_ffn));
        layers.push(LayerParams {
            qkv_bias,
            o_bias,
            attn_norm,
            gate_bias,
            up_bias,
            down_bias,
            ffn_norm,
            q_norm,
            k_norm,
            v_norm,
            post_attn_norm,
            post_ffn_norm,
        });
    }
    let final_norm = match plan.order {
        NormOrder::Post => None,
        NormOrder::Pre { final_norm } => final_norm.map(|n| norm(&mut push, n)),
    };
    EncoderParams {
        pack,
        layers,
        final_norm,
    }
}

/// The rotary tables of one batch: cosines and sines (`[rows, half]` each, one block of rows per
/// distinct rotation: a 1-D rotation's positions from 0, or a sequence's own rows), the token
/// rows' rows in them (`[maps, T]`: one map per distinct assignment of rotations to sequences),
/// each layer's map (`None`: no rotation), the rotated pairs per head and the pair layout.
#[derive(Clone, Debug, PartialEq)]
pub struct RopeTables {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
    pub row_of: Vec<u32>,
    pub layer_map: Vec<Option<usize>>,
    pub half: usize,
    pub interleaved: bool,
    /// `rotate_half` sections per head when not interleaved ([`SeqRope::sections`]): angle `j`
    /// rotates the pair `(2 w ⌊j / w⌋ + j mod w, that + w)` with `w = half / sections`.
    pub sections: usize,
}

/// The tables of the layers' rotations `ropes_of` (each layer's [`EncoderLayer::rope_of`], in
/// order) over sequences of lengths `lens`: `Ok(None)` when no layer rotates, `Err` (the
/// reason) when one kernel cannot apply them all (rotations of several widths or layouts, or
/// wider than a head of `head_dim`) or rows do not fit their sequences ([`RopeOf::check`]).
pub fn rope_tables<'r>(
    ropes_of: impl IntoIterator<Item = Option<RopeOf<'r>>>,
    lens: &[usize],
    head_dim: usize,
) -> Result<Option<RopeTables>, &'static str> {
    // (rotation, rows it needs, its first row in the tables)
    let mut ropes: Vec<(SeqRope, usize, usize)> = Vec::new();
    // Each distinct map: the rotation of every sequence, as indices into `ropes`.
    let mut maps: Vec<Vec<usize>> = Vec::new();
    let mut layer_map = Vec::new();
    for rope_of in ropes_of {
        let Some(rope_of) = rope_of else {
            layer_map.push(None);
            continue;
        };
        if rope_of.check(lens).is_err() {
            return Err("rotary rows that do not fit the sequences");
        }
        let mut which = Vec::with_capacity(lens.len());
        for (s, &n) in lens.iter().enumerate() {
            let r = rope_of.of_sequence(s, n);
            let i = match ropes.iter().position(|(q, _, _)| q.same(r)) {
                Some(i) => i,
                None => {
                    ropes.push((r, 0, 0));
                    ropes.len() - 1
                }
            };
            ropes[i].1 = ropes[i].1.max(n);
            which.push(i);
        }
        let m = match maps.iter().position(|m| *m == which) {
            Some(m) => m,
            None => {
                maps.push(which);
                maps.len() - 1
            }
        };
        layer_map.push(Some(m));
    }
    let Some(first) = ropes.first() else {
        return Ok(None);
    };
    let (dim, interleaved, sections) = (first.0.dim(), first.0.interleaved(), first.0.sections());
    let uniform = ropes.iter().all(|(r, _, _)| {
        r.dim() == dim && r.interleaved() == interleaved && r.sections() == sections
    });
    let whole_sections = sections > 0 && (dim / 2).is_multiple_of(sections);
    if !uniform || !whole_sections || dim > head_dim || dim % 2 != 0 || dim == 0 {
        return Err("rotary positions of several widths or layouts, or wider than a head");
    }
    let half = dim / 2;
    let rows: usize = ropes.iter().map(|r| r.1).sum();
    let (mut cos, mut sin) = (vec![0f32; rows * half], vec![0f32; rows * half]);
    let mut first_row = 0;
    for (r, n, at) in &mut ropes {
        *at = first_row;
        let span = first_row * half..(first_row + *n) * half;
        r.tables(*n, &mut cos[span.clone()], &mut sin[span]);
        first_row += *n;
    }
    let mut row_of = Vec::with_capacity(maps.len() * lens.iter().sum::<usize>());
    for which in &maps {
        for (&n, &i) in lens.iter().zip(which) {
            let at = ropes[i].2 as u32;
            row_of.extend((0..n as u32).map(|p| at + p));
        }
    }
    Ok(Some(RopeTables {
        cos,
        sin,
        row_of,
        layer_map,
        half,
        interleaved,
        sections,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RopeConfig, RopeScaling, RopeStyle};
    use crate::nn::{Rope, RopeRows};

    fn rope(theta: f32, dim: usize) -> Rope {
        Rope::new(
            &RopeConfig {
                theta,
                dim,
                style: RopeStyle::Half,
                scaling: RopeScaling::None,
            },
            None,
        )
    }

    #[test]
    fn rope_tables_share_rotations_and_maps() {
        let (a, b) = (rope(10_000.0, 8), rope(160_000.0, 8));
        let (of_a, of_b) = (|_: usize| &a, |n: usize| if n > 3 { &b } else { &a });
        let (of_a, of_b) = (RopeOf::Positions(&of_a), RopeOf::Positions(&of_b));
        let ropes: [Option<RopeOf>; 4] = [Some(of_a), None, Some(of_b), Some(of_a)];
        let lens = [2usize, 5];
        let t = rope_tables(ropes, &lens, 8).unwrap().unwrap();
        // a for both sequences (layers 0, 3), a then b (layer 2): two maps; a needs 5 rows, b 5.
        assert_eq!(t.layer_map, vec![Some(0), None, Some(1), Some(0)]);
        assert_eq!(t.half, 4);
        assert_eq!(t.cos.len(), (5 + 5) * 4);
        assert_eq!(t.row_of, vec![0, 1, 0, 1, 2, 3, 4, 0, 1, 5, 6, 7, 8, 9]);
        let (mut c, mut s) = (vec![0f32; 4], vec![0f32; 4]);
        b.tables(3, 1, &mut c, &mut s);
        assert_eq!(&t.cos[(5 + 3) * 4..(5 + 4) * 4], &c[..]);
        let wide = rope(10_000.0, 16);
        let of_wide = |_: usize| &wide;
        let wide_of = RopeOf::Positions(&of_wide);
        assert!(rope_tables([Some(wide_of)], &lens, 8).is_err());
        assert_eq!(rope_tables([None, None], &lens, 8), Ok(None));
    }

    #[test]
    fn rope_tables_take_rows_as_given() {
        // A sequence of 2 tokens and one of 3, each with its own rows (a patch grid each).
        let rows = [
            RopeRows::axial_2d(8, 10_000.0, [(0, 0), (0, 1)].into_iter()),
            RopeRows::axial_2d(8, 10_000.0, [(1, 0), (1, 1), (2, 0)].into_iter()),
        ];
        let lens = [2usize, 3];
        let of = RopeOf::Rows(&rows);
        let t = rope_tables([Some(of), None, Some(of)], &lens, 8)
            .unwrap()
            .unwrap();
        assert_eq!(t.layer_map, vec![Some(0), None, Some(0)]);
        assert_eq!((t.half, t.interleaved), (4, false));
        assert_eq!(t.row_of, vec![0, 1, 2, 3, 4]);
        assert_eq!(&t.cos[..8], rows[0].cos());
        assert_eq!(&t.sin[8..], rows[1].sin());
        // The second sequence alone (a pass over part of the batch).
        let t = rope_tables([Some(of.of_sequences(1..2))], &lens[1..], 8)
            .unwrap()
            .unwrap();
        assert_eq!(&t.cos[..], rows[1].cos());
        // Rows that do not fit the batch, or a head narrower than they rotate.
        assert!(rope_tables([Some(of)], &[3, 2], 8).is_err());
        assert!(rope_tables([Some(of)], &lens[..1], 8).is_err());
        assert!(rope_tables([Some(of)], &lens, 4).is_err());
    }
}
