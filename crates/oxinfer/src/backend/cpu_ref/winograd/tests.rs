use super::*;
use crate::backend::cpu_ref::conv::{conv2d_cpu_images, conv_geom};
use crate::backend::NormKind;
use oxinfer_kernels::WeightFormat;

use super::super::test_rng::Rng;

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
    variant: Variant,
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
    let ww = WinogradWeight::new(&wm, cin, variant).unwrap();
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

/// Measured for F(4×4): at most 8.0e-6 over the shapes of `matches_direct_convolution` (the
/// direct product alone is within ~1e-7 of exact); 3e-5 leaves room for other instruction
/// sets' summation orders, while a wrong tap, position or edge tile gives O(0.1).
const TOL: f64 = 3e-5;

/// Measured for F(2×2): at most 8.4e-7 over the same shapes (constants 0, ±1, ½: close
/// to the direct sum's own rounding).
const TOL_F2: f64 = 3e-6;

/// The bound of `variant`.
fn tol(variant: Variant) -> f64 {
    match variant {
        Variant::F4x4 => TOL,
        Variant::F2x2 => TOL_F2,
    }
}

const VARIANTS: [Variant; 2] = [Variant::F4x4, Variant::F2x2];

#[test]
fn matches_direct_convolution() {
    let mut rng = Rng(0x5157_0123_4567_89ab);
    let mut worst = [0f64; 2];
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
                        for (vi, variant) in VARIANTS.into_iter().enumerate() {
                            let e =
                                compare(&mut rng, h, w, cin, cout, images, norm, block, variant);
                            assert!(
                                e < tol(variant),
                                "{variant:?} {images} x {h}x{w}x{cin} -> {cout} norm {norm:?} \
                                 block {block}: rel err {e:.2e}"
                            );
                            worst[vi] = worst[vi].max(e);
                        }
                    }
                }
            }
        }
    }
    println!(
        "winograd vs direct: max relative error F(4x4) {:.2e}, F(2x2) {:.2e}",
        worst[0], worst[1]
    );
}

#[test]
fn wide_channels_and_default_blocks() {
    // Channels well past the GEMM's panels and k slices, several tile-row blocks.
    let mut rng = Rng(99);
    let (cin, cout) = (130, 96);
    for variant in VARIANTS {
        let e = compare(&mut rng, 13, 11, cin, cout, 3, Some(26), 2, variant);
        assert!(e < tol(variant), "{variant:?} rel err {e:.2e}");
        let tw = 11usize.div_ceil(variant.tile_out());
        assert!(block_tile_rows(variant, tw, cin, cout) >= 1);
        let e = compare(&mut rng, 9, 16, cin, cout, 2, None, usize::MAX, variant);
        assert!(e < tol(variant), "{variant:?} rel err {e:.2e}");
    }
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
        f2 in proptest::bool::ANY,
    ) {
        let variant = if f2 { Variant::F2x2 } else { Variant::F4x4 };
        let e = compare(&mut Rng(seed), h, w, cin, cout, images, None, block, variant);
        proptest::prop_assert!(e < tol(variant), "{:?} rel err {:.2e}", variant, e);
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
        for variant in VARIANTS {
            let want = bits(WinogradWeight::new(&wm, cin, variant).unwrap());
            let got = bits(WinogradWeight::from_stored(&stored, cout, cin, variant).unwrap());
            assert!(want == got, "{variant:?} {cout} x {cin}");
            // Position (0, 0) is g[0][0] · G[0][0]² exactly (1/16 for F(4×4), 1 for F(2×2)):
            // the placement of every pair.
            let scale = (variant.g()[0][0] * variant.g()[0][0]) as f32;
            let w = WinogradWeight::from_stored(&stored, cout, cin, variant).unwrap();
            assert_eq!(w.u.len(), variant.positions());
            let mut u0 = w.u[0].clone();
            let p0: Vec<f32> = u0.panels_mut().flat_map(|p| p.to_vec()).collect();
            for o in 0..cout {
                for c in 0..cin {
                    let v = p0[(o / NR * cin + c) * NR + o % NR];
                    assert_eq!(v, oihw[(o * cin + c) * 9] * scale, "pair ({o}, {c})");
                }
            }
        }
    }
    let e = WinogradWeight::from_stored(&[0u8; 35], 1, 1, Variant::F2x2)
        .unwrap_err()
        .0;
    assert!(e.contains("35 bytes"), "{e}");
}

#[test]
fn shape_errors_name_the_dimension() {
    let bytes = vec![0u8; 4 * 9 * 8 * 4];
    let wm = WeightMatrix::new(WeightFormat::F32, &bytes, 4, 72).unwrap();
    let e = WinogradWeight::new(&wm, 7, Variant::F4x4).unwrap_err().0;
    assert!(e.contains("columns"), "{e}");
    let w2 = WinogradWeight::new(&wm, 8, Variant::F2x2).unwrap();
    assert_eq!(w2.variant(), Variant::F2x2);
    assert_eq!(w2.size_bytes(), 16 * 16 * 8 * 4);
    let ww = WinogradWeight::new(&wm, 8, Variant::F4x4).unwrap();
    assert_eq!((ww.cin(), ww.cout(), ww.variant()), (8, 4, Variant::F4x4));
    assert_eq!(ww.size_bytes(), 36 * 16 * 8 * 4);
    let x = vec![0f32; 5 * 6 * 8];
    let mut y = vec![0f32; 5 * 6 * 4];
    let g = conv_geom(5, 6, 8, 3, 1).unwrap();
    conv2d_winograd_images(&x, 1, &g, None, &ww, &mut y).unwrap();
    conv2d_winograd_images(&x, 1, &g, None, &w2, &mut y).unwrap();
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
