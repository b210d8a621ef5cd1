//! [`Partial`]: the online-softmax state of a task's rows over some of their keys (running
//! max, sum of exponentials, unnormalized output), and the one way two such states are merged.
//! Every attention call reduces a row's keys segment by segment and merges the segments'
//! states in key order with [`Partial::merge`], whether one task walks the segments or one
//! task per segment runs them in parallel: the same operations in the same order, so the same
//! bits.

/// Online-softmax state of `rows` rows of `head_dim` values over a set of keys.
#[derive(Clone, Debug)]
pub(super) struct Partial {
    /// Largest scaled (and soft-capped) score seen per row; `-∞` while a row has seen no key.
    pub(super) m: Vec<f32>,
    /// `Σ exp(score − m)` per row.
    pub(super) l: Vec<f32>,
    /// `Σ exp(score − m) · v` per row, `[rows, head_dim]` row-major.
    pub(super) o: Vec<f32>,
    /// Values per row of `o`.
    hd: usize,
}

impl Partial {
    /// The state of `rows` rows that have seen no key.
    pub(super) fn new(rows: usize, hd: usize) -> Self {
        Partial {
            m: vec![f32::NEG_INFINITY; rows],
            l: vec![0.0; rows],
            o: vec![0.0; rows * hd],
            hd,
        }
    }

    /// Back to the state of no key seen (the rows and width stay).
    pub(super) fn clear(&mut self) {
        self.m.fill(f32::NEG_INFINITY);
        self.l.fill(0.0);
        self.o.fill(0.0);
    }

    /// Merges `next` (the same rows over later keys) into `self`: a row that has seen no key
    /// in `next` is left as it is, a row that had seen none takes `next`'s state exactly, and
    /// otherwise both are rescaled to the larger max (`exp(m_i − m)`) and added.
    pub(super) fn merge(&mut self, next: &Partial) {
        let hd = self.hd;
        debug_assert_eq!((self.m.len(), hd), (next.m.len(), next.hd));
        for r in 0..self.m.len() {
            let (mn, o) = (next.m[r], &mut self.o[r * hd..(r + 1) * hd]);
            let on = &next.o[r * hd..(r + 1) * hd];
            if mn == f32::NEG_INFINITY {
                continue;
            }
            if self.m[r] == f32::NEG_INFINITY {
                self.m[r] = mn;
                self.l[r] = next.l[r];
                o.copy_from_slice(on);
                continue;
            }
            let m = self.m[r].max(mn);
            let (c, cn) = ((self.m[r] - m).exp(), (mn - m).exp());
            self.m[r] = m;
            self.l[r] = self.l[r] * c + next.l[r] * cn;
            for (x, y) in o.iter_mut().zip(on) {
                *x = *x * c + *y * cn;
            }
        }
    }

    /// Row `r`'s attention output: `o / l` (zeros for a row that saw no key) into `dst`.
    pub(super) fn write_row(&self, r: usize, dst: &mut [f32]) {
        let inv = if self.l[r] > 0.0 {
            1.0 / self.l[r]
        } else {
            0.0
        };
        for (d, x) in dst.iter_mut().zip(&self.o[r * self.hd..(r + 1) * self.hd]) {
            *d = x * inv;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Merging two halves equals the softmax over all keys; empty states are neutral.
    #[test]
    fn merge_matches_one_softmax() {
        // One row, head_dim 1: scores [1, 3] with values [10, 20], then [2] with value [30].
        let state = |s: &[f32], v: &[f32]| {
            let m = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut p = Partial::new(1, 1);
            p.m[0] = m;
            p.l[0] = s.iter().map(|x| (x - m).exp()).sum();
            p.o[0] = s.iter().zip(v).map(|(x, v)| (x - m).exp() * v).sum();
            p
        };
        let (a, b) = (state(&[1.0, 3.0], &[10.0, 20.0]), state(&[2.0], &[30.0]));
        let mut total = Partial::new(1, 1);
        total.merge(&Partial::new(1, 1));
        total.merge(&a);
        assert_eq!(
            (total.m[0], total.l[0], total.o[0]),
            (a.m[0], a.l[0], a.o[0])
        );
        total.merge(&b);
        total.merge(&Partial::new(1, 1));
        let mut got = [0f32];
        total.write_row(0, &mut got);
        let w: Vec<f64> = [1.0f64, 3.0, 2.0].iter().map(|x| x.exp()).collect();
        let want = (w[0] * 10.0 + w[1] * 20.0 + w[2] * 30.0) / w.iter().sum::<f64>();
        assert!(
            (f64::from(got[0]) - want).abs() < 1e-5,
            "{} vs {want}",
            got[0]
        );
        let mut empty = [7f32];
        Partial::new(1, 1).write_row(0, &mut empty);
        assert_eq!(empty, [0.0]);
    }
}
