//! Tiled VAE decoding against diffusers 0.42's `AutoencoderKL.tiled_decode` (float32) on the
//! tiny SD 1.x fixture (`tools/ref/make_tiny_sd.py`): tiles of 64 image / 8 latent pixels,
//! stride 6, blended over 16 pixels; `[1, 4, 10, 13]` latents make 2 × 3 tiles with a short last
//! row and a one-pixel last column.
//!
//! Tiled VAE encoding against diffusers' `_tiled_encode` (`vae.enable_tiling()`) on the same
//! fixture (`make_tiny_sd.py tiled-encode`): an 80 × 104 image in tiles of 64 pixels, stride
//! 48, moments blended over 2 latent pixels and cropped to 6: 2 × 3 tiles, the last row 32 and
//! the last column 8 pixels. Its posterior, and an image-to-image run of it (tiled encode and
//! decode, recorded noise).

mod common;

use common::{fixtures, max_abs_diff, read_npy_f32, scaled_diff};
use oxinfer::arch::diffusion::vae_tiling::{decode_tiled, encode_tiled, TileGeometry};
use oxinfer::arch::diffusion::{FeatureMap, GenerateRequest, StableDiffusion, VaeTiling};
use std::path::Path;

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

fn npy(dir: &Path, name: &str) -> (Vec<usize>, Vec<f32>) {
    read_npy_f32(&dir.join("reference").join(format!("{name}.npy")))
}

#[test]
fn tiled_encode_matches_diffusers() {
    let dir = fixtures().join("tiny_sd1");
    let sd = StableDiffusion::load(&dir).unwrap();
    let tiles = sd.vae.config.tiles();
    assert_eq!(
        (
            tiles.encode_stride(),
            tiles.encode_blend(),
            tiles.encode_keep()
        ),
        (48, 2, 6)
    );
    let enc = sd.vae_encoder.as_ref().expect("encoder weights");
    let (shape, img) = npy(&dir, "vae_tiled_enc_input");
    let (h, w) = (shape[2], shape[3]);
    let image = FeatureMap::from_chw(&img, 3, h, w);
    let post = encode_tiled(enc, &image, tiles).unwrap();
    assert_eq!((post.mean.c, post.mean.h, post.mean.w), (4, 10, 13));
    let (want_mean, want_std) = (
        npy(&dir, "vae_tiled_enc_mean").1,
        npy(&dir, "vae_tiled_enc_std").1,
    );
    let dm = max_abs_diff(&post.mean.to_chw(), &want_mean);
    let ds = max_abs_diff(&post.std.to_chw(), &want_std);
    eprintln!("tiled VAE encode: mean max abs diff {dm:.2e}, std {ds:.2e}");
    assert!(
        dm < 1e-4 && ds < 1e-4,
        "tiled encode: mean {dm:e}, std {ds:e}"
    );
    // Tiling changes the posterior near the seams: the comparison above is of the tiled path.
    let plain = enc.encode(&image).unwrap();
    assert!(max_abs_diff(&plain.mean.to_chw(), &want_mean) > 1e-2);

    // When tiles are used: diffusers' rule on the image's pixels.
    assert!(sd.tiles_encode(h, w, VaeTiling::On));
    assert!(
        !sd.tiles_encode(h, w, VaeTiling::Auto),
        "small: auto does not tile"
    );
    assert!(!sd.tiles_encode(h, w, VaeTiling::Off));
    assert!(
        !sd.tiles_encode(64, 64, VaeTiling::On),
        "one tile is encoded whole"
    );
    assert!(
        sd.tiles_encode(1032, 1024, VaeTiling::Auto),
        "above 1024 x 1024 pixels"
    );
    assert!(
        !sd.tiles_encode(1024, 1024, VaeTiling::Auto),
        "1024 x 1024 itself is whole"
    );

    // Image to image through the pipeline: tiled encode and decode with `On`; with `Off` the
    // encode is the untiled one.
    let r = common::reference(&dir.join("reference"));
    let i2i = &r["vae_tiled_encode"];
    let enc_noise = npy(&dir, "vae_tiled_enc_noise").1;
    let req = GenerateRequest {
        prompt: r["prompt"].as_str().unwrap().into(),
        negative_prompt: r["negative_prompt"].as_str().unwrap().into(),
        steps: i2i["steps"].as_u64().unwrap() as usize,
        guidance_scale: r["guidance_scale"].as_f64().unwrap() as f32,
        width: w,
        height: h,
        init_image: Some(img.clone()),
        strength: i2i["strength"].as_f64().unwrap() as f32,
        encode_noise: Some(enc_noise.clone()),
        init_noise: Some(npy(&dir, "vae_tiled_enc_add_noise").1),
        vae_tiling: VaeTiling::On,
        ..Default::default()
    };
    let out = sd.generate(&req, &mut |_, _, _| {}).unwrap();
    let dl = scaled_diff(&out.latents, &npy(&dir, "vae_tiled_enc_img2img_latents").1);
    let di = max_abs_diff(&out.image, &npy(&dir, "vae_tiled_enc_img2img_image").1);
    eprintln!("tiled img2img: latents scaled diff {dl:.2e}, image max abs diff {di:.2e}");
    assert!(
        dl < 1e-4 && di < 1e-4,
        "tiled img2img: latents {dl:e}, image {di:e}"
    );

    // The pipeline's posterior sample: tiled with `On`, the untiled encode with `Off` (and
    // with `Auto`, this image being small).
    let k = sd.vae.config.scaling_factor;
    let sample = |p: &oxinfer::arch::diffusion::vae_encoder::Posterior| -> Vec<f32> {
        let (m, s) = (p.mean.to_chw(), p.std.to_chw());
        (0..m.len())
            .map(|i| (m[i] + s[i] * enc_noise[i]) * k)
            .collect()
    };
    let latents = |tiling| {
        let r = GenerateRequest {
            vae_tiling: tiling,
            ..req.clone()
        };
        sd.encode_image(&img, &r, (4, h / 8, w / 8)).unwrap()
    };
    assert_eq!(latents(VaeTiling::On), sample(&post));
    assert_eq!(latents(VaeTiling::Off), sample(&plain));
    assert_eq!(latents(VaeTiling::Auto), sample(&plain));
}
