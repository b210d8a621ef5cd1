//! Image resizing exactly as Pillow's `Image.resize(…, BICUBIC)` does it on 8-bit images (the
//! resampling transformers' PIL image processors use): a separable convolution with the
//! `a = -0.5` cubic kernel widened by the scale when shrinking (antialiasing), weights
//! normalized in f64 then rounded to 22-bit fixed point, the horizontal pass first with its
//! result rounded and clipped to 8 bits, then the vertical pass.

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

/// For each output index: the first input index and the fixed-point weights of its taps.
fn coefficients(in_size: usize, out_size: usize) -> Vec<(usize, Vec<i32>)> {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    (0..out_size)
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
            let one = (1u32 << PRECISION_BITS) as f64;
            let fixed = w
                .iter()
                .map(|&v| {
                    let v = if total != 0.0 { v / total } else { v };
                    if v < 0.0 {
                        (-0.5 + v * one) as i32
                    } else {
                        (0.5 + v * one) as i32
                    }
                })
                .collect();
            (xmin, fixed)
        })
        .collect()
}

/// Pillow's `clip8`: a fixed-point sum back to 0..=255.
fn clip8(v: i64) -> u8 {
    if v >= (1i64 << PRECISION_BITS << 8) {
        255
    } else if v <= 0 {
        0
    } else {
        (v >> PRECISION_BITS) as u8
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
    let (w0, h0) = (img.width as usize, img.height as usize);
    let (w1, h1) = (width as usize, height as usize);
    let mut cur = img.pixels.clone();
    let mut cur_w = w0;
    if w1 != w0 {
        let cx = coefficients(w0, w1);
        let mut out = vec![0u8; h0 * w1 * 3];
        for y in 0..h0 {
            let row = &cur[y * w0 * 3..(y + 1) * w0 * 3];
            for (x, (x0, k)) in cx.iter().enumerate() {
                for c in 0..3 {
                    let mut ss = 1i64 << (PRECISION_BITS - 1);
                    for (j, &kw) in k.iter().enumerate() {
                        ss += row[(x0 + j) * 3 + c] as i64 * kw as i64;
                    }
                    out[(y * w1 + x) * 3 + c] = clip8(ss);
                }
            }
        }
        cur = out;
        cur_w = w1;
    }
    if h1 != h0 {
        let cy = coefficients(h0, h1);
        let stride = cur_w * 3;
        let mut out = vec![0u8; h1 * stride];
        for (y, (y0, k)) in cy.iter().enumerate() {
            for i in 0..stride {
                let mut ss = 1i64 << (PRECISION_BITS - 1);
                for (j, &kw) in k.iter().enumerate() {
                    ss += cur[(y0 + j) * stride + i] as i64 * kw as i64;
                }
                out[y * stride + i] = clip8(ss);
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
