//! Tiled VAE decoding and encoding, exactly as diffusers' `AutoencoderKL.tiled_decode` and
//! `_tiled_encode`.
//!
//! Decoding: the latents are cut into overlapping square tiles of `sample_size / scale` latent
//! pixels (64 for SD 1.x) every `3/4` of a tile, each tile is decoded on its own, and each
//! decoded tile is blended in place with the already blended tile above it and the one to its
//! left over `sample_size / 4` image pixels (linear ramps), then cropped to `sample_size · 3/4`
//! pixels and stitched.
//!
//! Encoding is the mirror image: the image is cut into tiles of `sample_size` pixels every
//! `sample_size · 3/4`, each tile's posterior moments (encoder + `quant_conv`, before the
//! mean / log-variance split) are blended over `sample_size / scale / 4` latent pixels and
//! cropped to the rest of a latent tile, and the posterior is taken of the stitched moments.
//!
//! Peak memory is that of one tile's decode or encode, whatever the image size; the result
//! differs from an untiled one near the seams (as in diffusers).

use super::layers::FeatureMap;
use super::vae::VaeDecoder;
use super::vae_encoder::{Posterior, VaeEncoder};
use super::DiffusionError;

/// Whether the pipeline decodes (and, for image to image, encodes) in tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VaeTiling {
    /// Tiles when the image has more than [`AUTO_TILE_PIXELS`] pixels and is larger than one
    /// tile.
    #[default]
    Auto,
    /// Tiles whenever the image is larger than one tile (diffusers' `enable_vae_tiling()`).
    On,
    /// Never tiles.
    Off,
}

impl VaeTiling {
    /// Whether to tile an image of `pixels` pixels that is `larger` than one tile (in either
    /// direction): never when [`VaeTiling::Off`], when larger with [`VaeTiling::On`], when also
    /// above [`AUTO_TILE_PIXELS`] with [`VaeTiling::Auto`].
    pub fn tiles(self, larger: bool, pixels: usize) -> bool {
        match self {
            VaeTiling::Off => false,
            VaeTiling::On => larger,
            VaeTiling::Auto => larger && pixels > AUTO_TILE_PIXELS,
        }
    }
}

/// Above this many image pixels (1024 × 1024) [`VaeTiling::Auto`] decodes and encodes in tiles.
pub const AUTO_TILE_PIXELS: usize = 1024 * 1024;

/// diffusers' `tile_overlap_factor`.
const OVERLAP_FACTOR: f64 = 0.25;

/// The tile geometry of a VAE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileGeometry {
    /// Tile side in image pixels (`tile_sample_min_size`: the VAE's `sample_size`).
    pub sample: usize,
    /// Tile side in latent pixels (`tile_latent_min_size`: `sample / scale`).
    pub latent: usize,
}

impl TileGeometry {
    /// Decoding: latent pixels between the starts of neighbouring tiles (`latent · 3/4`).
    pub fn stride(&self) -> usize {
        (self.latent as f64 * (1.0 - OVERLAP_FACTOR)) as usize
    }

    /// Decoding: image pixels over which neighbouring tiles are blended (`sample / 4`).
    pub fn blend(&self) -> usize {
        (self.sample as f64 * OVERLAP_FACTOR) as usize
    }

    /// Decoding: image pixels kept of each tile per side (`sample − blend`).
    pub fn keep(&self) -> usize {
        self.sample - self.blend()
    }

    /// Whether latents of `h × w` are larger than one tile (diffusers tiles only then).
    pub fn needs_tiles(&self, h: usize, w: usize) -> bool {
        h > self.latent || w > self.latent
    }

    /// Encoding: image pixels between the starts of neighbouring tiles (`sample · 3/4`).
    pub fn encode_stride(&self) -> usize {
        (self.sample as f64 * (1.0 - OVERLAP_FACTOR)) as usize
    }

    /// Encoding: latent pixels over which neighbouring tiles' moments are blended
    /// (`latent / 4`).
    pub fn encode_blend(&self) -> usize {
        (self.latent as f64 * OVERLAP_FACTOR) as usize
    }

    /// Encoding: latent pixels kept of each tile per side (`latent − encode_blend`).
    pub fn encode_keep(&self) -> usize {
        self.latent - self.encode_blend()
    }

    /// Whether an image of `h × w` pixels is larger than one tile (diffusers' tiled encode
    /// rule).
    pub fn needs_encode_tiles(&self, h: usize, w: usize) -> bool {
        h > self.sample || w > self.sample
    }
}

/// `b`'s first rows blended with `a`'s last: `b[y] = a[a.h − e + y] · (1 − y/e) + b[y] · y/e`
/// for `y < e = min(a.h, b.h, extent)` (diffusers' `blend_v`; same widths).
fn blend_v(a: &FeatureMap, b: &mut FeatureMap, extent: usize) {
    let e = a.h.min(b.h).min(extent);
    let row = b.w * b.c;
    for y in 0..e {
        let (wa, wb) = ramp(y, e);
        let src = &a.data[(a.h - e + y) * row..(a.h - e + y + 1) * row];
        let dst = &mut b.data[y * row..(y + 1) * row];
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &s)| *d = s * wa + *d * wb);
    }
}

/// `b`'s first columns blended with `a`'s last (diffusers' `blend_h`; same heights).
fn blend_h(a: &FeatureMap, b: &mut FeatureMap, extent: usize) {
    let e = a.w.min(b.w).min(extent);
    let c = b.c;
    for r in 0..b.h {
        for x in 0..e {
            let (wa, wb) = ramp(x, e);
            let s = (r * a.w + a.w - e + x) * c;
            let d = (r * b.w + x) * c;
            for k in 0..c {
                b.data[d + k] = a.data[s + k] * wa + b.data[d + k] * wb;
            }
        }
    }
}

/// The blend weights `(1 − i/e, i/e)`, computed in f64 and rounded to f32 as torch multiplies
/// a float tensor by a Python float.
fn ramp(i: usize, e: usize) -> (f32, f32) {
    let t = i as f64 / e as f64;
    ((1.0 - t) as f32, t as f32)
}

/// Rows `y0..y0 + h` and columns `x0..x0 + w` of `m` (clipped to its size).
fn crop(m: &FeatureMap, y0: usize, x0: usize, h: usize, w: usize) -> FeatureMap {
    let (h, w) = (h.min(m.h - y0), w.min(m.w - x0));
    let mut data = Vec::with_capacity(h * w * m.c);
    for y in y0..y0 + h {
        let s = (y * m.w + x0) * m.c;
        data.extend_from_slice(&m.data[s..s + w * m.c]);
    }
    FeatureMap::new(h, w, m.c, data)
}

/// Decodes `z` (already divided by the scaling factor) tile by tile with `tiles`' geometry;
/// the same size and channels as [`VaeDecoder::decode`] gives.
///
/// # Errors
/// As [`VaeDecoder::decode`]; a tile geometry with a zero stride.
pub fn decode_tiled(
    vae: &VaeDecoder,
    z: &FeatureMap,
    tiles: TileGeometry,
) -> Result<FeatureMap, DiffusionError> {
    if z.h == 0 || z.w == 0 {
        return vae.decode(z);
    }
    let step = Steps {
        tile: tiles.latent,
        stride: tiles.stride(),
        blend: tiles.blend(),
        keep: tiles.keep(),
    };
    map_tiled(z, step, tiles, |t| vae.decode(t))
}

/// The posterior of `image` (values in `[-1, 1]`) encoded tile by tile with `tiles`' geometry
/// (diffusers' `_tiled_encode` then `DiagonalGaussianDistribution`); the same size and channels
/// as [`VaeEncoder::encode`] gives.
///
/// # Errors
/// As [`VaeEncoder::encode`]; a tile geometry with a zero stride.
pub fn encode_tiled(
    enc: &VaeEncoder,
    image: &FeatureMap,
    tiles: TileGeometry,
) -> Result<Posterior, DiffusionError> {
    if image.h == 0 || image.w == 0 {
        return enc.encode(image);
    }
    let step = Steps {
        tile: tiles.sample,
        stride: tiles.encode_stride(),
        blend: tiles.encode_blend(),
        keep: tiles.encode_keep(),
    };
    let moments = map_tiled(image, step, tiles, |t| enc.moments(t))?;
    Ok(Posterior::from_moments(&moments))
}

/// How [`map_tiled`] cuts its input and stitches its output.
#[derive(Clone, Copy)]
struct Steps {
    /// Tile side in input pixels.
    tile: usize,
    /// Input pixels between the starts of neighbouring tiles.
    stride: usize,
    /// Output pixels over which neighbouring tiles are blended.
    blend: usize,
    /// Output pixels kept of each tile per side.
    keep: usize,
}

/// `f` of `x` tile by tile: `x` cut into overlapping `tile`-pixel squares every `stride`
/// pixels, each output blended in place with the (already blended) output above it and the one
/// to its left (diffusers' order), cropped to `keep × keep` and stitched.
fn map_tiled(
    x: &FeatureMap,
    step: Steps,
    tiles: TileGeometry,
    f: impl Fn(&FeatureMap) -> Result<FeatureMap, DiffusionError>,
) -> Result<FeatureMap, DiffusionError> {
    if step.stride == 0 || step.keep == 0 {
        return Err(DiffusionError::Argument(format!(
            "VAE tiling: a tile of {} image / {} latent pixels is too small",
            tiles.sample, tiles.latent
        )));
    }
    let mut rows: Vec<Vec<FeatureMap>> = Vec::new();
    for i in (0..x.h).step_by(step.stride) {
        let mut row = Vec::new();
        for j in (0..x.w).step_by(step.stride) {
            row.push(f(&crop(x, i, j, step.tile, step.tile))?);
        }
        rows.push(row);
    }
    for i in 0..rows.len() {
        for j in 0..rows[i].len() {
            if i > 0 {
                let (above, below) = rows.split_at_mut(i);
                blend_v(&above[i - 1][j], &mut below[0][j], step.blend);
            }
            if j > 0 {
                let (left, right) = rows[i].split_at_mut(j);
                blend_h(&left[j - 1], &mut right[0], step.blend);
            }
        }
    }
    let keep = step.keep;
    let kept: Vec<Vec<FeatureMap>> = rows
        .iter()
        .map(|row| row.iter().map(|t| crop(t, 0, 0, keep, keep)).collect())
        .collect();
    let c = kept[0][0].c;
    let h: usize = kept.iter().map(|r| r[0].h).sum();
    let w: usize = kept[0].iter().map(|t| t.w).sum();
    let mut data = Vec::with_capacity(h * w * c);
    for row in &kept {
        for y in 0..row[0].h {
            for t in row {
                data.extend_from_slice(&t.data[y * t.w * c..(y + 1) * t.w * c]);
            }
        }
    }
    Ok(FeatureMap::new(h, w, c, data))
}
