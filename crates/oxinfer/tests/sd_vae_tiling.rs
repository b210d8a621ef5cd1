//! Tiled VAE decoding against diffusers 0.42's `AutoencoderKL.tiled_decode` (float32) on the
//! tiny SD 1.x fixture (`tools/ref/make_tiny_sd.py`): tiles of 64 image / 8 latent pixels,
//! stride 6, blended over 16 pixels; `[1, 4, 10, 13]` latents make 2 × 3 tiles with a short last
//! row and a one-pixel last column.

mod common;

use common::{fixtures, max_abs_diff, read_npy_f32};
use oxinfer::arch::diffusion::vae_tiling::{decode_tiled, TileGeometry};
use oxinfer::arch::diffusion::{FeatureMap, StableDiffusion, VaeTiling};

#[test]
fn tiled_decode_matches_diffusers() {
    let dir = fixtures().join("tiny_sd1");
    let sd = StableDiffusion::load(&dir).unwrap();
    let tiles = sd.vae.config.tiles();
    assert_eq!(
        tiles,
        TileGeometry {
            sample: 64,
            latent: 8
        }
    );
    assert_eq!((tiles.stride(), tiles.blend(), tiles.keep()), (6, 16, 48));
    let (shape, z) = read_npy_f32(&dir.join("reference/vae_tiled_in.npy"));
    let (_, want) = read_npy_f32(&dir.join("reference/vae_tiled_out.npy"));
    let zm = FeatureMap::from_chw(&z, shape[1], shape[2], shape[3]);
    let got = decode_tiled(&sd.vae, &zm, tiles).unwrap();
    assert_eq!((got.c, got.h, got.w), (3, 80, 104));
    let d = max_abs_diff(&got.to_chw(), &want);
    eprintln!("tiled VAE decode: max abs diff {d:.2e}");
    assert!(d < 1e-4, "tiled decode: max diff {d:e}");
    // Tiling changes the image near the seams: the comparison above is of the tiled path.
    let plain = sd.vae.decode(&zm).unwrap().to_chw();
    assert!(max_abs_diff(&plain, &want) > 1e-2);

    // Through the pipeline's decode (which divides by the scaling factor first).
    let k = sd.vae.config.scaling_factor;
    let scaled: Vec<f32> = z.iter().map(|v| v * k).collect();
    let (h, w) = (shape[2], shape[3]);
    let piped = sd.decode(&scaled, 4, h, w, VaeTiling::On).unwrap();
    assert!(max_abs_diff(&piped, &want) < 1e-4);

    // When tiles are used.
    assert!(sd.tiles_decode(h, w, VaeTiling::On));
    assert!(
        !sd.tiles_decode(h, w, VaeTiling::Auto),
        "small: auto does not tile"
    );
    assert!(!sd.tiles_decode(h, w, VaeTiling::Off));
    assert!(
        !sd.tiles_decode(8, 8, VaeTiling::On),
        "one tile is decoded whole"
    );
    assert!(
        sd.tiles_decode(129, 128, VaeTiling::Auto),
        "above 1024 x 1024 pixels"
    );
    assert!(
        !sd.tiles_decode(128, 128, VaeTiling::Auto),
        "1024 x 1024 itself is whole"
    );
}
