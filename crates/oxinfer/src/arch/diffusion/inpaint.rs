//! Inpainting as diffusers' `StableDiffusionInpaintPipeline` does it with an inpainting UNet
//! (`in_channels` = 2 · latent channels + 1: 9 for SD): the mask is binarized at 0.5 (white =
//! repaint), the image's repainted pixels are set to 0 (`image · (mask < 0.5)`) and encoded by
//! the VAE (a posterior sample), the mask is downsampled to the latents by nearest neighbour,
//! and every UNet call takes `[latents, mask, masked image latents]` stacked along the channels.
//! The denoised latents themselves start from the image's latents noised to the first step run
//! (strength < 1) or from pure noise (strength 1), as image to image.
//!
//! With a plain UNet (`in_channels` = latent channels) the same pipeline runs the UNet on the
//! latents alone and, after every step, puts the image back where the mask keeps it
//! ([`LatentBlend`]): `latents = (1 − mask) · add_noise(image latents, noise, next step) + mask ·
//! latents`, the image's latents unnoised after the last step, the noise the initial noise.

use super::DiffusionError;

/// Whether a UNet of `unet_in` input channels over latents of `latent` channels is an
/// inpainting one (the latents, one mask channel, the masked image's latents).
pub fn is_inpainting_unet(unet_in: usize, latent: usize) -> bool {
    unet_in == 2 * latent + 1
}

/// The mask binarized as diffusers' mask processor (`do_binarize`): 1 (repaint) where the value
/// is at least 0.5, else 0 (keep).
pub fn binarize(mask: &[f32]) -> Vec<f32> {
    mask.iter()
        .map(|&v| if v >= 0.5 { 1.0 } else { 0.0 })
        .collect()
}

/// `image` (CHW `[3, H, W]`) with the repainted pixels of the binarized `mask` (`[H, W]`) set to
/// 0, the rest kept: diffusers' `init_image * (mask_condition < 0.5)`.
pub fn masked_image(image: &[f32], mask: &[f32]) -> Vec<f32> {
    let hw = mask.len();
    image
        .iter()
        .enumerate()
        .map(|(i, &v)| if mask[i % hw] < 0.5 { v } else { 0.0 })
        .collect()
}

/// The `[H, W]` mask at the latents' `[H / scale, W / scale]`: torch's `interpolate` (nearest)
/// picks the pixel `(scale · i, scale · j)`.
pub fn mask_latents(mask: &[f32], height: usize, width: usize, scale: usize) -> Vec<f32> {
    let (h, w) = (height / scale, width / scale);
    (0..h)
        .flat_map(|i| (0..w).map(move |j| mask[i * scale * width + j * scale]))
        .collect()
}

/// The inputs an inpainting UNet takes besides the latents, for a batch of `batch` images.
pub struct InpaintCondition {
    /// The mask at the latents' size, `[h, w]` (0 keep, 1 repaint).
    pub mask: Vec<f32>,
    /// The masked image's latents (times the VAE's scaling factor), `[batch, c, h, w]`.
    pub masked_latents: Vec<f32>,
}

impl InpaintCondition {
    /// The UNet input for `x`, NCHW `[images, c, h, w]` (the scaled latents, `images` a multiple
    /// of the batch: both guidance branches): `[images, 2c + 1, h, w]`, image `i` taking the
    /// masked latents of image `i mod batch`.
    ///
    /// # Errors
    /// Sizes that do not fit together (names them).
    pub fn unet_input(&self, x: &[f32], images: usize) -> Result<Vec<f32>, DiffusionError> {
        let hw = self.mask.len();
        let per = x.len() / images.max(1);
        let batch = self.masked_latents.len() / per.max(1);
        if images == 0
            || x.len() != images * per
            || hw == 0
            || !per.is_multiple_of(hw)
            || batch == 0
        {
            return Err(DiffusionError::Argument(format!(
                "inpainting: latents of {} values for {images} images do not fit a mask of {hw} \
                 latent pixels and masked latents of {} values",
                x.len(),
                self.masked_latents.len()
            )));
        }
        let mut out = Vec::with_capacity(images * (2 * per + hw));
        for (i, xi) in x.chunks_exact(per).enumerate() {
            out.extend_from_slice(xi);
            out.extend_from_slice(&self.mask);
            let k = i % batch;
            out.extend_from_slice(&self.masked_latents[k * per..(k + 1) * per]);
        }
        Ok(out)
    }
}

/// Inpainting with a plain UNet: the mask at the latents' size and the init image's latents the
/// denoised latents are blended with after every step.
pub struct LatentBlend {
    /// The mask at the latents' size, `[h, w]` (0 keep, 1 repaint).
    pub mask: Vec<f32>,
    /// The init image's latents (times the VAE's scaling factor), `[batch, c, h, w]`.
    pub image: Vec<f32>,
}

impl LatentBlend {
    /// `latents = (1 − mask) · kept + mask · latents`, NCHW `[batch, c, h, w]` both, `kept`
    /// the image's latents at the level of the next step (diffusers' `init_latents_proper`).
    pub fn apply(&self, latents: &mut [f32], kept: &[f32]) {
        let hw = self.mask.len().max(1);
        for (k, (l, &p)) in latents.iter_mut().zip(kept).enumerate() {
            let m = self.mask[k % hw];
            *l = (1.0 - m) * p + m * *l;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_rules_follow_diffusers() {
        assert_eq!(binarize(&[0.0, 0.49, 0.5, 1.0]), [0.0, 0.0, 1.0, 1.0]);
        // 2 x 4 image, one channel shown per plane.
        let mask = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let img: Vec<f32> = (1..=24).map(|v| v as f32).collect();
        let m = masked_image(&img, &mask);
        assert_eq!(&m[..8], &[1.0, 0.0, 0.0, 4.0, 0.0, 6.0, 7.0, 0.0]);
        assert_eq!(&m[16..], &[17.0, 0.0, 0.0, 20.0, 0.0, 22.0, 23.0, 0.0]);
        assert_eq!(mask_latents(&mask, 2, 4, 2), [0.0, 1.0]);
        let cond = InpaintCondition {
            mask: vec![9.0],
            masked_latents: vec![5.0, 6.0],
        };
        // Two branches of one image, two channels each.
        let x = cond.unet_input(&[1.0, 2.0, 3.0, 4.0], 2).unwrap();
        assert_eq!(x, [1.0, 2.0, 9.0, 5.0, 6.0, 3.0, 4.0, 9.0, 5.0, 6.0]);
        assert!(cond.unet_input(&[1.0, 2.0, 3.0], 2).is_err());
        assert!(is_inpainting_unet(9, 4) && !is_inpainting_unet(4, 4));
        // Two channels of a 1 x 2 mask: the kept pixel takes the image's value.
        let blend = LatentBlend {
            mask: vec![0.0, 1.0],
            image: vec![],
        };
        let mut lat = [1.0, 2.0, 3.0, 4.0];
        blend.apply(&mut lat, &[10.0, 20.0, 30.0, 40.0]);
        assert_eq!(lat, [10.0, 2.0, 30.0, 4.0]);
    }
}
