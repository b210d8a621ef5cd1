//! Tiled VAE decoding, exactly as diffusers' `AutoencoderKL.tiled_decode`: the latents are cut
//! into overlapping square tiles of `sample_size / scale` latent pixels (64 for SD 1.x), each
//! tile is decoded on its own, and each decoded tile is blended in place with the already
//! blended tile above it and the one to its left over `sample_size / 4` image pixels (linear
//! ramps), then cropped to `sample_size · 3/4` pixels and stitched. Peak memory is that of one
//! tile's decode, whatever the image size; the result differs from an untiled decode near the
//! seams (as in diffusers).

use super::layers::FeatureMap;
use super::vae::VaeDecoder;
use super::DiffusionError;

/// Whether the pipeline decodes in tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VaeTiling {
    /// Tiles when the image has more than [`AUTO_TILE_PIXELS`] pixels and the latents are
    /// larger than one tile.
    #[default]
    Auto,
    /// Tiles whenever the latents are larger than one tile (diffusers' `enable_vae_tiling()`).
    On,
    /// Never tiles.
    Off,
}

/// Above this many image pixels (1024 × 1024) [`VaeTiling::Auto`] decodes in tiles.
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
    /// Latent pixels between the starts of neighbouring tiles (`latent · 3/4`).
    pub fn stride(&self) -> usize {
        (self.latent as f64 * (1.0 - OVERLAP_FACTOR)) as usize
    }

    /// Image pixels over which neighbouring tiles are blended (`sample / 4`).
    pub fn blend(&self) -> usize {
        (self.sample as f64 * OVERLAP_FACTOR) as usize
    }

    /// Image pixels kept of each tile per side (`sample − blend`).
    pub fn keep(&self) -> usize {
        self.sample - self.blend()
    }

    /// Whether latents of `h × w` are larger than one tile (diffusers tiles only then).
    pub fn needs_tiles(&self, h: usize, w: usize) -> bool {
        h > self.latent || w > self.latent
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
    let stride = tiles.stride();
    if stride == 0 || tiles.keep() == 0 {
        return Err(DiffusionError::Argument(format!(
            "VAE tiling: a tile of {} image / {} latent pixels is too small",
            tiles.sample, tiles.latent
        )));
    }
    let mut rows: Vec<Vec<FeatureMap>> = Vec::new();
    for i in (0..z.h).step_by(stride) {
        let mut row = Vec::new();
        for j in (0..z.w).step_by(stride) {
            row.push(vae.decode(&crop(z, i, j, tiles.latent, tiles.latent))?);
        }
        rows.push(row);
    }
    // Blend in diffusers' order, in place: each tile with the (already blended) tile above and
    // the (already blended) tile to its left.
    let (blend, keep) = (tiles.blend(), tiles.keep());
    for i in 0..rows.len() {
        for j in 0..rows[i].len() {
            if i > 0 {
                let (above, below) = rows.split_at_mut(i);
                blend_v(&above[i - 1][j], &mut below[0][j], blend);
            }
            if j > 0 {
                let (left, right) = rows[i].split_at_mut(j);
                blend_h(&left[j - 1], &mut right[0], blend);
            }
        }
    }
    // Crop each tile to `keep × keep` and stitch.
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
