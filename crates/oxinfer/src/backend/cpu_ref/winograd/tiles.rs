//! The two Winograd algorithms of [`super`]: their transform matrices (Lavin–Gray) and the
//! input and output transforms of one column of a tile written out over runs of `L` channels
//! (vectorizable loops), behind one trait ([`Tile`]) that the tiling code of [`super`] is
//! generic over.
//!
//! - F(4×4, 3×3) ([`F43`]): 6 × 6 input tiles, the points `0, 1, −1, 2, −2, ∞`; 36 products
//!   per 16 outputs and channel pair (a quarter of the direct convolution's 144), the
//!   transformed weight 36 / 9 = 4 times the kernel.
//! - F(2×2, 3×3) ([`F23`]): 4 × 4 input tiles, the points `0, 1, −1, ∞`; 16 products per 4
//!   outputs (2.25 times fewer than 36), the transformed weight 16 / 9 = 1.78 times the kernel,
//!   and smaller transform constants (rounding closer to the direct convolution's).

/// One Winograd algorithm F(`OUT` × `OUT`, 3 × 3) over `IN` × `IN` input tiles
/// (`IN = OUT + 2`): the written-out transforms of one tile column, `L` channels each.
pub(super) trait Tile<const IN: usize, const OUT: usize> {
    /// `o = Bᵀ d`: one column of `IN` input pixels to its `IN` positions.
    fn bt<const L: usize>(d: [&[f32; L]; IN], o: &mut [[f32; L]; IN]);
    /// `o = Aᵀ m`: one column of `IN` positions to its `OUT` output pixels.
    fn at<const L: usize>(m: [&[f32; L]; IN], o: &mut [[f32; L]; OUT]);
}

/// F(4×4, 3×3).
pub struct F43;

impl F43 {
    /// `Bᵀ`, the input transform (rows: positions, columns: input pixels).
    pub const BT: [[f64; 6]; 6] = [
        [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ];

    /// `G`, the kernel transform (rows: positions, columns: the 3 taps).
    pub const G: [[f64; 3]; 6] = [
        [1.0 / 4.0, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ];

    /// `Aᵀ`, the output transform (rows: the 4 outputs, columns: positions).
    pub const AT: [[f64; 6]; 4] = [
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
        [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
        [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
        [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
    ];
}

impl Tile<6, 4> for F43 {
    #[inline(always)]
    fn bt<const L: usize>(d: [&[f32; L]; 6], o: &mut [[f32; L]; 6]) {
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

    #[inline(always)]
    fn at<const L: usize>(m: [&[f32; L]; 6], o: &mut [[f32; L]; 4]) {
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
}

/// F(2×2, 3×3).
pub struct F23;

impl F23 {
    /// `Bᵀ`, the input transform (rows: positions, columns: input pixels).
    pub const BT: [[f64; 4]; 4] = [
        [1.0, 0.0, -1.0, 0.0],
        [0.0, 1.0, 1.0, 0.0],
        [0.0, -1.0, 1.0, 0.0],
        [0.0, 1.0, 0.0, -1.0],
    ];

    /// `G`, the kernel transform (rows: positions, columns: the 3 taps).
    pub const G: [[f64; 3]; 4] = [
        [1.0, 0.0, 0.0],
        [0.5, 0.5, 0.5],
        [0.5, -0.5, 0.5],
        [0.0, 0.0, 1.0],
    ];

    /// `Aᵀ`, the output transform (rows: the 2 outputs, columns: positions).
    pub const AT: [[f64; 4]; 2] = [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]];
}

impl Tile<4, 2> for F23 {
    #[inline(always)]
    fn bt<const L: usize>(d: [&[f32; L]; 4], o: &mut [[f32; L]; 4]) {
        let [d0, d1, d2, d3] = d;
        let [o0, o1, o2, o3] = o;
        for l in 0..L {
            o0[l] = d0[l] - d2[l];
            o1[l] = d1[l] + d2[l];
            o2[l] = d2[l] - d1[l];
            o3[l] = d1[l] - d3[l];
        }
    }

    #[inline(always)]
    fn at<const L: usize>(m: [&[f32; L]; 4], o: &mut [[f32; L]; 2]) {
        let [m0, m1, m2, m3] = m;
        let [o0, o1] = o;
        for l in 0..L {
            o0[l] = m0[l] + m1[l] + m2[l];
            o1[l] = m1[l] - m2[l] - m3[l];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::test_rng::Rng;
    use super::*;

    /// `y_i = Σ_k d_{i+k} g_k` for `i < out` from `Aᵀ[(G g) ⊙ (Bᵀ d)]` in f64.
    fn exact_correlation(bt: &[&[f64]], g: &[[f64; 3]], at: &[&[f64]], seed: u64) {
        let n = bt.len();
        let mut rng = Rng(seed);
        for _ in 0..100 {
            let d: Vec<f64> = (0..n).map(|_| f64::from(rng.f())).collect();
            let gk: Vec<f64> = (0..3).map(|_| f64::from(rng.f())).collect();
            let u: Vec<f64> = g
                .iter()
                .map(|r| r.iter().zip(&gk).map(|(a, b)| a * b).sum())
                .collect();
            let v: Vec<f64> = bt
                .iter()
                .map(|r| r.iter().zip(&d).map(|(a, b)| a * b).sum())
                .collect();
            for (i, a) in at.iter().enumerate() {
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
    fn one_dimensional_transforms_are_exact_correlations() {
        let rows = |m: &'static [[f64; 6]]| m.iter().map(|r| &r[..]).collect::<Vec<_>>();
        exact_correlation(&rows(&F43::BT), &F43::G, &rows(&F43::AT), 42);
        let rows = |m: &'static [[f64; 4]]| m.iter().map(|r| &r[..]).collect::<Vec<_>>();
        exact_correlation(&rows(&F23::BT), &F23::G, &rows(&F23::AT), 43);
    }

    /// The written-out transforms of `T` against the matrices, on small integers (every sum is
    /// exact in f32, so the comparison is exact).
    fn written_out_matches<T: Tile<IN, OUT>, const IN: usize, const OUT: usize>(
        bt: &[[f64; IN]; IN],
        at: &[[f64; IN]; OUT],
    ) {
        const L: usize = 64;
        let mut rng = Rng(7);
        let col: [[f32; L]; IN] =
            std::array::from_fn(|_| std::array::from_fn(|_| (rng.f() * 8.0).round()));
        let (mut b, mut a) = ([[0f32; L]; IN], [[0f32; L]; OUT]);
        T::bt(std::array::from_fn(|i| &col[i]), &mut b);
        T::at(std::array::from_fn(|i| &col[i]), &mut a);
        for l in 0..L {
            for i in 0..IN {
                let want: f64 = (0..IN).map(|k| bt[i][k] * f64::from(col[k][l])).sum();
                assert_eq!(f64::from(b[i][l]), want, "Bᵀ row {i}");
            }
            for i in 0..OUT {
                let want: f64 = (0..IN).map(|k| at[i][k] * f64::from(col[k][l])).sum();
                assert_eq!(f64::from(a[i][l]), want, "Aᵀ row {i}");
            }
        }
    }

    #[test]
    fn written_out_transforms_match_the_matrices() {
        written_out_matches::<F43, 6, 4>(&F43::BT, &F43::AT);
        written_out_matches::<F23, 4, 2>(&F23::BT, &F23::AT);
    }
}
