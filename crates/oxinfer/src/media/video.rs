//! Videos as sequences of RGB frames: an animated GIF, WebP or PNG (APNG) decoded to every
//! frame of its canvas (the `image` crate composites each frame over the previous ones as the
//! format's disposal says), or a folder of still images read in file-name order. The frame
//! rate comes from the frame delays (frames / total duration: the average rate a video
//! decoder reports), or is given for a folder.

use super::image::{check_size, decode_image, RgbImage};
use super::{Limits, MediaError};
use ::image::codecs::{gif::GifDecoder, png::PngDecoder, webp::WebPDecoder};
use ::image::{AnimationDecoder, Frames, ImageDecoder, ImageFormat};
use std::io::Cursor;
use std::path::Path;

/// The frames of a video, all of one size, with their rate.
#[derive(Clone, Debug, PartialEq)]
pub struct VideoClip {
    /// The frames in order.
    pub frames: Vec<RgbImage>,
    /// Frames per second, when known (from the delays or given); `None`: unknown (the
    /// processor then assumes its default, as transformers does).
    pub fps: Option<f64>,
}

/// Decodes an animated GIF, WebP or PNG (`input` in errors) to all its frames. Refuses a
/// still image, a canvas over `limits`, and frames totalling more than `limits.max_pixels`
/// pixels.
pub fn decode_video(bytes: &[u8], input: &str, limits: &Limits) -> Result<VideoClip, MediaError> {
    let err = |what: String| MediaError::new(input, what);
    if bytes.is_empty() {
        return Err(err("empty video (0 bytes)".into()));
    }
    let format = ::image::guess_format(bytes).ok();
    let bad = |name: &'static str| {
        move |e: ::image::ImageError| err(format!("cannot decode {name}: {e}"))
    };
    let still = |name: &str| {
        err(format!(
            "a still {name} is not a video (an animated GIF, WebP or PNG, or a folder of frames, \
             is)"
        ))
    };
    let (frames, size) =
        match format {
            Some(ImageFormat::Gif) => {
                let d = GifDecoder::new(Cursor::new(bytes)).map_err(bad("GIF"))?;
                let size = d.dimensions();
                (d.into_frames(), size)
            }
            Some(ImageFormat::Png) => {
                let d = PngDecoder::new(Cursor::new(bytes)).map_err(bad("PNG"))?;
                if !d.is_apng().map_err(bad("PNG"))? {
                    return Err(still("PNG"));
                }
                let size = d.dimensions();
                (d.apng().map_err(bad("PNG"))?.into_frames(), size)
            }
            Some(ImageFormat::WebP) => {
                let d = WebPDecoder::new(Cursor::new(bytes)).map_err(bad("WebP"))?;
                if !d.has_animation() {
                    return Err(still("WebP"));
                }
                let size = d.dimensions();
                (d.into_frames(), size)
            }
            _ => return Err(err(
                "not a video: animated GIF, WebP and PNG (APNG) files are read, or a folder of \
                 frames"
                    .into(),
            )),
        };
    check_size(size.0, size.1, "video", limits).map_err(err)?;
    collect_frames(frames, size, input, limits)
}

/// Every frame of `frames` as RGB (alpha dropped, as PIL's `convert("RGB")`), with the rate
/// from the delays.
fn collect_frames(
    frames: Frames<'_>,
    (w, h): (u32, u32),
    input: &str,
    limits: &Limits,
) -> Result<VideoClip, MediaError> {
    let err = |what: String| MediaError::new(input, what);
    let mut out = Vec::new();
    let mut ms = 0.0f64;
    for f in frames {
        let f = f.map_err(|e| err(format!("cannot decode frame {}: {e}", out.len())))?;
        let (num, den) = f.delay().numer_denom_ms();
        ms += num as f64 / den.max(1) as f64;
        if (out.len() as u64 + 1) * (w as u64 * h as u64) > limits.max_pixels {
            return Err(err(too_long(out.len() + 1, w, h, limits)));
        }
        let rgba = f.into_buffer();
        let pixels = rgba.pixels().flat_map(|p| [p[0], p[1], p[2]]).collect();
        out.push(RgbImage {
            width: rgba.width(),
            height: rgba.height(),
            pixels,
        });
    }
    if out.is_empty() {
        return Err(err("the video has no frames".into()));
    }
    let fps = (ms > 0.0).then(|| out.len() as f64 * 1000.0 / ms);
    Ok(VideoClip { frames: out, fps })
}

fn too_long(n: usize, w: u32, h: u32, limits: &Limits) -> String {
    format!(
        "{n} frames of {w}×{h} pixels are too many (at most {} pixels over all frames)",
        limits.max_pixels
    )
}

/// The still images of folder `dir` (PNG, JPEG, WebP, GIF's first frame), in file-name order,
/// as one video at `fps` frames per second. Returns the clip and every file's bytes in order
/// (what identifies the video). Refuses an empty folder, frames of different sizes and
/// frames totalling more than `limits.max_pixels` pixels.
pub fn read_frame_dir(
    dir: &Path,
    fps: Option<f64>,
    limits: &Limits,
) -> Result<(VideoClip, Vec<u8>), MediaError> {
    let input = dir.display().to_string();
    let err = |what: String| MediaError::new(&input, what);
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| err(e.to_string()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(err("the folder holds no frames".into()));
    }
    let mut frames: Vec<RgbImage> = Vec::with_capacity(paths.len());
    let mut identity = Vec::new();
    for p in &paths {
        let bytes = super::read_file(p)?;
        let f = decode_image(&bytes, &p.display().to_string(), limits)?;
        if let Some(first) = frames.first() {
            if (f.width, f.height) != (first.width, first.height) {
                return Err(err(format!(
                    "frames differ in size: {} is {}×{}, {} is {}×{} (a video's frames must \
                     all have one size)",
                    paths[0].display(),
                    first.width,
                    first.height,
                    p.display(),
                    f.width,
                    f.height
                )));
            }
        }
        if (frames.len() as u64 + 1) * (f.width as u64 * f.height as u64) > limits.max_pixels {
            return Err(err(too_long(frames.len() + 1, f.width, f.height, limits)));
        }
        identity.extend((bytes.len() as u64).to_le_bytes());
        identity.extend(&bytes);
        frames.push(f);
    }
    if let Some(r) = fps {
        if !(r.is_finite() && r > 0.0) {
            return Err(err(format!("frame rate {r} is not a positive number")));
        }
        identity.extend(r.to_le_bytes());
    }
    Ok((VideoClip { frames, fps }, identity))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::image::codecs::gif::GifEncoder;
    use ::image::{Delay, Frame, RgbaImage};

    fn gif(n: usize, w: u32, h: u32, ms: u32) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut enc = GifEncoder::new(&mut out);
            for i in 0..n {
                let img = RgbaImage::from_fn(w, h, |x, y| {
                    ::image::Rgba([(x * 40) as u8, (y * 40) as u8, (i * 60) as u8, 255])
                });
                enc.encode_frame(Frame::from_parts(
                    img,
                    0,
                    0,
                    Delay::from_numer_denom_ms(ms, 1),
                ))
                .unwrap();
            }
        }
        out
    }

    #[test]
    fn gif_frames_and_rate_from_the_delays() {
        let v = decode_video(&gif(3, 4, 2, 250), "a.gif", &Limits::default()).unwrap();
        assert_eq!(v.frames.len(), 3);
        assert_eq!((v.frames[2].width, v.frames[2].height), (4, 2));
        assert_eq!(v.fps, Some(4.0));
        // Pixel (1, 1) of frame 2: (40, 40, 120), exact in the GIF's palette.
        assert_eq!(&v.frames[2].pixels[3 * 5..3 * 6], &[40, 40, 120]);
    }

    #[test]
    fn stills_empty_input_and_long_videos_fail_by_name() {
        let lim = Limits::default();
        let e = decode_video(&[], "x.gif", &lim).unwrap_err();
        assert_eq!(e.to_string(), "x.gif: empty video (0 bytes)");
        let e = decode_video(b"\xff\xd8\xff\xe0 jpeg", "x.jpg", &lim).unwrap_err();
        assert!(e.to_string().starts_with("x.jpg: not a video"), "{e}");
        let mut png = Vec::new();
        RgbaImage::new(2, 2)
            .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .unwrap();
        let e = decode_video(&png, "s.png", &lim).unwrap_err();
        assert!(e.to_string().contains("a still PNG is not a video"), "{e}");
        let g = gif(3, 4, 2, 100);
        let e = decode_video(&g[..g.len() / 2], "cut.gif", &lim).unwrap_err();
        assert!(e.to_string().starts_with("cut.gif: cannot decode"), "{e}");
        let small = Limits {
            max_pixels: 20,
            ..lim
        };
        let e = decode_video(&g, "long.gif", &small).unwrap_err();
        assert!(
            e.to_string()
                .contains("3 frames of 4×2 pixels are too many"),
            "{e}"
        );
    }
}
