//! Image decoding: PNG, JPEG, WebP and GIF (first frame) to 8-bit RGB, with the size checked
//! from the header first.

use super::{Limits, MediaError};
use ::image::{ImageFormat, ImageReader};
use std::io::Cursor;

/// An 8-bit RGB image, row-major `[height, width, 3]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    /// `height · width · 3` bytes.
    pub pixels: Vec<u8>,
}

/// The formats decoded.
const FORMATS: [(ImageFormat, &str); 4] = [
    (ImageFormat::Png, "PNG"),
    (ImageFormat::Jpeg, "JPEG"),
    (ImageFormat::WebP, "WebP"),
    (ImageFormat::Gif, "GIF"),
];

/// Decodes `bytes` (named `input` in errors) to RGB; alpha is dropped, as PIL's
/// `convert("RGB")` does. Refuses an image over `limits` before decoding its pixels.
pub fn decode_image(bytes: &[u8], input: &str, limits: &Limits) -> Result<RgbImage, MediaError> {
    let err = |what: String| MediaError::new(input, what);
    if bytes.is_empty() {
        return Err(err("empty image (0 bytes)".into()));
    }
    let reader = |b| {
        ImageReader::new(Cursor::new(b))
            .with_guessed_format()
            .map_err(|e| err(format!("cannot read: {e}")))
    };
    let format = reader(bytes)?.format();
    let Some(format) = format.filter(|f| FORMATS.iter().any(|(g, _)| g == f)) else {
        return Err(err(
            "unsupported image format (PNG, JPEG, WebP and GIF are supported)".into(),
        ));
    };
    let name = FORMATS
        .iter()
        .find(|(g, _)| *g == format)
        .map_or("", |f| f.1);
    let (w, h) = reader(bytes)?
        .into_dimensions()
        .map_err(|e| err(format!("bad {name} header: {e}")))?;
    check_size(w, h, &format!("{name} image"), limits).map_err(err)?;
    let mut r = reader(bytes)?;
    let mut lim = ::image::Limits::default();
    lim.max_image_width = Some(limits.max_side);
    lim.max_image_height = Some(limits.max_side);
    lim.max_alloc = Some(limits.max_pixels.saturating_mul(16));
    r.limits(lim);
    let img = r
        .decode()
        .map_err(|e| err(format!("cannot decode {name}: {e}")))?;
    let rgb = img.into_rgb8();
    Ok(RgbImage {
        width: rgb.width(),
        height: rgb.height(),
        pixels: rgb.into_raw(),
    })
}

/// Refuses a `w × h` picture (`what`: `PNG image`, `video`) that is empty or over `limits`.
pub(super) fn check_size(w: u32, h: u32, what: &str, limits: &Limits) -> Result<(), String> {
    if w == 0 || h == 0 {
        return Err(format!("{what} of {w}×{h} pixels"));
    }
    if w > limits.max_side || h > limits.max_side || w as u64 * h as u64 > limits.max_pixels {
        return Err(format!(
            "{what} of {w}×{h} pixels is too large (at most {} a side and {} pixels)",
            limits.max_side, limits.max_pixels
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::image::{ImageBuffer, Rgba};

    fn encode(format: ImageFormat, w: u32, h: u32) -> Vec<u8> {
        let img = ImageBuffer::from_fn(w, h, |x, y| Rgba([x as u8, y as u8, 7, 200]));
        let mut out = Cursor::new(Vec::new());
        match format {
            ImageFormat::Png => img.write_to(&mut out, format).unwrap(),
            _ => ::image::DynamicImage::ImageRgba8(img)
                .to_rgb8()
                .write_to(&mut out, format)
                .unwrap(),
        }
        out.into_inner()
    }

    #[test]
    fn png_decodes_to_rgb_without_alpha() {
        let img =
            decode_image(&encode(ImageFormat::Png, 5, 3), "a.png", &Limits::default()).unwrap();
        assert_eq!((img.width, img.height), (5, 3));
        assert_eq!(&img.pixels[3 * (5 + 2)..3 * (5 + 3)], &[2, 1, 7]);
    }

    #[test]
    fn truncated_empty_unsupported_and_oversized_inputs_fail_by_name() {
        let png = encode(ImageFormat::Png, 40, 40);
        let lim = Limits::default();
        let e = decode_image(&png[..png.len() / 2], "cut.png", &lim).unwrap_err();
        assert!(
            e.to_string().starts_with("cut.png: cannot decode PNG"),
            "{e}"
        );
        let e = decode_image(&[], "empty.png", &lim).unwrap_err();
        assert_eq!(e.to_string(), "empty.png: empty image (0 bytes)");
        let e = decode_image(b"BM not really a bitmap", "x.bmp", &lim).unwrap_err();
        assert!(e.to_string().contains("unsupported image format"), "{e}");
        let small = Limits {
            max_side: 32,
            ..lim
        };
        let e = decode_image(&png, "big.png", &small).unwrap_err();
        assert!(e.to_string().contains("40×40 pixels is too large"), "{e}");
    }

    /// CRC-32 (IEEE) of `bytes`, as PNG chunks carry.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn huge_dimensions_are_refused_from_the_header() {
        // A PNG signature and a 20000×20000 RGB IHDR, nothing else: refused before any
        // pixel buffer exists.
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(20000u32.to_be_bytes());
        ihdr.extend(20000u32.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(13u32.to_be_bytes());
        png.extend(&ihdr);
        png.extend(crc32(&ihdr).to_be_bytes());
        for chunk in [&b"IDAT"[..], b"IEND"] {
            png.extend(0u32.to_be_bytes());
            png.extend(chunk);
            png.extend(crc32(chunk).to_be_bytes());
        }
        let e = decode_image(&png, "huge.png", &Limits::default()).unwrap_err();
        assert!(
            e.to_string().contains("20000×20000 pixels is too large"),
            "{e}"
        );
    }
}
