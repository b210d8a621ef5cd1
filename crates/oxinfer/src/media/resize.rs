//! Image resizing exactly as Pillow's `Image.resize(…, BICUBIC)` does it on 8-bit images (the
//! resampling transformers' PIL image processors use): a separable convolution with the
//! `a = -0.5` cubic kernel widened by the scale when shrinking (antialiasing), weights
//! normalized in f64 then rounded to 22-bit fixed point, the horizontal pass first with its
//! result rounded and clipped to 8 bits, then the vertical pass.
//!
//! torchvision's `resize(uint8 tensor, BICUBIC, antialias=True)` (what transformers' video
//! processors use; PyTorch's `_upsample_bicubic2d_aa` uint8 kernel) is the same computation
//! with int16 weights: per pass, the precision is the largest number of bits (under 22) at
//! which the largest weight still fits in 15 bits ([`resize_bicubic_torch`]).

use super::RgbImage;

/// Fixed-point precision of the weights (Pillow's `PRECISION_BITS`).
const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's bicubic kernel (`a = -0.5`), support 2.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// How the normalized weights become fixed point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fixed {
    /// Pillow: always [`PRECISION_BITS`].
    Pillow,
    /// PyTorch's uint8 kernel: int16 weights at the precision the largest weight allows.
    Torch,
}

/// The taps of every output index: first input index, fixed-point weights, and the precision
/// (bits) of those weights.
struct Taps {
    taps: Vec<(usize, Vec<i32>)>,
    bits: u32,
}

/// For each output index: the first input index and the fixed-point weights of its taps.
fn coefficients(in_size: usize, out_size: usize, fixed: Fixed) -> Taps {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    let normalized: Vec<(usize, Vec<f64>)> = (0..out_size)
        .map(|xx| {
            let center = (xx as f64 + 0.5) * scale;
            let ss = 1.0 / filterscale;
            // C's (int) truncation, then clamping, as Pillow's precompute_coeffs.
            let xmin = ((center - support + 0.5) as i64).max(0) as usize;
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
            let w: Vec<f64> = (xmin..xmax)
                .map(|x| bicubic((x as f64 - center + 0.5) * ss))
                .collect();
            let total: f64 = w.iter().sum();
            let w = w
                .iter()
                .map(|&v| if total != 0.0 { v / total } else { v })
                .collect();
            (xmin, w)
        })
        .collect();
    let bits = match fixed {
        Fixed::Pillow => PRECISION_BITS,
        Fixed::Torch => {
            let wt_max = normalized
                .iter()
                .flat_map(|(_, w)| w.iter().copied())
                .fold(0.0f64, f64::max);
            (0..PRECISION_BITS)
                .find(|&b| (0.5 + wt_max * (1u64 << (b + 1)) as f64) as i64 >= 1 << 15)
                .unwrap_or(PRECISION_BITS)
        }
    };
    let one = (1u64 << bits) as f64;
    let taps = normalized
        .into_iter()
        .map(|(xmin, w)| {
            let fixed = w
                .iter()
                .map(|&v| {
                    if v < 0.0 {
                        (-0.5 + v * one) as i32
                    } else {
                        (0.5 + v * one) as i32
                    }
                })
                .collect();
            (xmin, fixed)
        })
        .collect();
    Taps { taps, bits }
}

/// Pillow's `clip8`: a fixed-point sum of `bits` fraction bits back to 0..=255.
fn clip8(v: i64, bits: u32) -> u8 {
    if v >= (1i64 << bits << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> bits) as u8
    }
}

/// `img` at `width × height`: borrowed when it already has that size, else
/// [`resize_bicubic`]'s result.
pub fn resized_bicubic(img: &RgbImage, width: u32, height: u32) -> std::borrow::Cow<'_, RgbImage> {
    if (img.width, img.height) == (width, height) {
        std::borrow::Cow::Borrowed(img)
    } else {
        std::borrow::Cow::Owned(resize_bicubic(img, width, height))
    }
}

/// `img` resized to `width × height` with Pillow's bicubic filter.
pub fn resize_bicubic(img: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_with(img, width, height, Fixed::Pillow)
}

/// `img` resized to `width × height` as torchvision's antialiased bicubic resize of a uint8
/// tensor does it (PyTorch's int16-weight kernel; differs from Pillow by one level in a few
/// pixels).
pub fn resize_bicubic_torch(img: &RgbImage, width: u32, height: u32) -> RgbImage {
    resize_with(img, width, height, Fixed::Torch)
}

fn resize_with(img: &RgbImage, width: u32, height: u32, fixed: Fixed) -> RgbImage {
    let (w0, h0) = (img.width as usize, img.height as usize);
    let (w1, h1) = (width as usize, height as usize);
    let mut cur = img.pixels.clone();
    let mut cur_w = w0;
    if w1 != w0 {
        let Taps { taps: cx, bits } = coefficients(w0, w1, fixed);
        let mut out = vec![0u8; h0 * w1 * 3];
        for y in 0..h0 {
            let row = &cur[y * w0 * 3..(y + 1) * w0 * 3];
            for (x, (x0, k)) in cx.iter().enumerate() {
                for c in 0..3 {
                    let mut ss = 1i64 << (bits - 1);
                    for (j, &kw) in k.iter().enumerate() {
                        ss += row[(x0 + j) * 3 + c] as i64 * kw as i64;
                    }
                    out[(y * w1 + x) * 3 + c] = clip8(ss, bits);
                }
            }
        }
        cur = out;
        cur_w = w1;
    }
    if h1 != h0 {
        let Taps { taps: cy, bits } = coefficients(h0, h1, fixed);
        let stride = cur_w * 3;
        let mut out = vec![0u8; h1 * stride];
        for (y, (y0, k)) in cy.iter().enumerate() {
            for i in 0..stride {
                let mut ss = 1i64 << (bits - 1);
                for (j, &kw) in k.iter().enumerate() {
                    ss += cur[(y0 + j) * stride + i] as i64 * kw as i64;
                }
                out[y * stride + i] = clip8(ss, bits);
            }
        }
        cur = out;
    }
    RgbImage {
        width,
        height,
        pixels: cur,
    }
}
