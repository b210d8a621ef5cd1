//! The image conditioning of [`StableDiffusion`]'s requests: the VAE posterior of an image to
//! image's starting image and, for inpainting, the mask and the masked image's latents (an
//! inpainting UNet) or the image's latents to blend with (a plain UNet) ([`super::inpaint`]).

use super::inpaint::{binarize, mask_latents, masked_image, InpaintCondition, LatentBlend};
use super::layers::FeatureMap;
use super::pipeline::{batch_noise, GenerateRequest, StableDiffusion};
use super::pipeline::{ENCODE_NOISE_SEED, MASK_ENCODE_NOISE_SEED};
use super::vae_tiling::{encode_tiled, VaeTiling};
use super::DiffusionError;

impl StableDiffusion {
    /// The latents of `image` (NCHW `[1, 3, H, W]` in `[-1, 1]`) for each of the request's
    /// `N` images: the VAE posterior (computed once, in tiles as `req.vae_tiling` says:
    /// [`Self::tiles_encode`]) sampled with `req.encode_noise` (one
    /// sample for all, or one per image) or each image's seeded noise, times the scaling
    /// factor. NCHW `[N, c, h, w]` for latents of `(c, h, w)`.
    ///
    /// # Errors
    /// A folder without the VAE encoder's weights; an image or encode noise of the wrong size.
    pub fn encode_image(
        &self,
        image: &[f32],
        req: &GenerateRequest,
        shape: (usize, usize, usize),
    ) -> Result<Vec<f32>, DiffusionError> {
        let noise = (&req.encode_noise, ENCODE_NOISE_SEED, "encode noise");
        self.encode_sampled(image, req, shape, noise)
    }

    /// The request's `init_image` and its `mask` binarized at 0.5 (`[H, W]`, 1 = repaint).
    ///
    /// # Errors
    /// A missing image or mask; a mask whose size is not the image's.
    fn image_and_mask<'r>(
        &self,
        req: &'r GenerateRequest,
    ) -> Result<(&'r [f32], Vec<f32>), DiffusionError> {
        let (Some(image), Some(mask)) = (&req.init_image, &req.mask) else {
            return Err(DiffusionError::Argument(
                "inpainting needs an init image and a mask".into(),
            ));
        };
        let (hh, ww) = (req.height, req.width);
        if mask.len() != hh * ww {
            return Err(DiffusionError::Argument(format!(
                "mask has {} values, expected [{hh}, {ww}] (the image's height x width) = {}",
                mask.len(),
                hh * ww
            )));
        }
        Ok((image, binarize(mask)))
    }

    /// The inpainting UNet's extra inputs for `req` (its `init_image` and `mask`): the
    /// binarized mask at the latents' size and the latents of the masked image (the VAE
    /// posterior sampled with `req.mask_encode_noise`, or seeded noise), for latents of
    /// `(c, h, w)`.
    ///
    /// # Errors
    /// A missing image or mask; a mask whose size is not the image's; as [`Self::encode_image`].
    pub(super) fn inpaint_condition(
        &self,
        req: &GenerateRequest,
        shape: (usize, usize, usize),
    ) -> Result<InpaintCondition, DiffusionError> {
        let (image, mask) = self.image_and_mask(req)?;
        let masked = masked_image(image, &mask);
        let noise = (
            &req.mask_encode_noise,
            MASK_ENCODE_NOISE_SEED,
            "mask encode noise",
        );
        Ok(InpaintCondition {
            masked_latents: self.encode_sampled(&masked, req, shape, noise)?,
            mask: mask_latents(&mask, req.height, req.width, self.vae.config.scale()),
        })
    }

    /// What inpainting with a plain UNet blends the latents with after each step (`req`'s
    /// `init_image` and `mask`): the binarized mask at the latents' size and the init image's
    /// latents ([`Self::encode_image`], with `req.encode_noise`), for latents of `(c, h, w)`.
    ///
    /// # Errors
    /// As [`Self::inpaint_condition`].
    pub(super) fn latent_blend(
        &self,
        req: &GenerateRequest,
        shape: (usize, usize, usize),
    ) -> Result<LatentBlend, DiffusionError> {
        let (image, mask) = self.image_and_mask(req)?;
        Ok(LatentBlend {
            image: self.encode_image(image, req, shape)?,
            mask: mask_latents(&mask, req.height, req.width, self.vae.config.scale()),
        })
    }

    /// [`Self::encode_image`] with the posterior's noise `noise`: the given values (named
    /// `what` in errors), else the batch's seeded noise mixed with the constant.
    fn encode_sampled(
        &self,
        image: &[f32],
        req: &GenerateRequest,
        (c, h, w): (usize, usize, usize),
        (noise, mix, what): (&Option<Vec<f32>>, u64, &str),
    ) -> Result<Vec<f32>, DiffusionError> {
        let enc = self
            .vae_encoder
            .as_ref()
            .ok_or_else(|| DiffusionError::Missing {
                path: self.path.join("vae"),
                what: "the VAE encoder's weights (encoder.*), needed for image-to-image".into(),
            })?;
        let (hh, ww) = (req.height, req.width);
        if image.len() != 3 * hh * ww {
            return Err(DiffusionError::Argument(format!(
                "init image has {} values, expected [1, 3, {hh}, {ww}]",
                image.len()
            )));
        }
        let image = FeatureMap::from_chw(image, 3, hh, ww);
        let post = if self.tiles_encode(hh, ww, req.vae_tiling) {
            encode_tiled(enc, &image, self.vae.config.tiles())?
        } else {
            enc.encode(&image)?
        };
        let (n, batch) = (c * h * w, req.batch);
        let seeded;
        let eps: &[f32] = match noise {
            Some(v) if v.len() == n || v.len() == batch * n => v,
            Some(v) => {
                return Err(DiffusionError::Argument(format!(
                    "{what} has {} values, expected [1, {c}, {h}, {w}] = {n} or \
                     [{batch}, {c}, {h}, {w}] = {}",
                    v.len(),
                    batch * n
                )))
            }
            None => {
                seeded = batch_noise(req.seed, mix, batch, 1, n);
                &seeded
            }
        };
        let k = self.vae.config.scaling_factor;
        let (mean, std) = (post.mean.to_chw(), post.std.to_chw());
        // One posterior sample (the noise's first image) or one per image.
        Ok((0..batch)
            .flat_map(|i| {
                let e = if eps.len() == n {
                    eps
                } else {
                    &eps[i * n..(i + 1) * n]
                };
                mean.iter()
                    .zip(&std)
                    .zip(e)
                    .map(move |((&m, &s), &e)| (m + s * e) * k)
            })
            .collect())
    }

    /// Whether an image of `height × width` pixels is encoded in tiles under `tiling` (image to
    /// image): never with [`VaeTiling::Off`]; with [`VaeTiling::On`] when it is larger than one
    /// tile (the VAE's `sample_size`, diffusers' rule); with [`VaeTiling::Auto`] when, also, it
    /// has more than [`AUTO_TILE_PIXELS`](super::vae_tiling::AUTO_TILE_PIXELS) pixels.
    pub fn tiles_encode(&self, height: usize, width: usize, tiling: VaeTiling) -> bool {
        let larger = self.vae.config.tiles().needs_encode_tiles(height, width);
        tiling.tiles(larger, height * width)
    }
}
