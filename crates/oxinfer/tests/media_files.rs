//! Real media files made by ImageMagick, espeak-ng and sox (tools/ref/make_media_fixtures.py)
//! decoded by `oxinfer::media` and compared with PIL's decode and sox's resampling.

use oxinfer::media::{decode_audio, decode_image, Limits};
use sha2::{Digest, Sha256};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/media")
}

fn reference() -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir().join("reference.json")).unwrap()).unwrap()
}

#[test]
fn images_decode_as_pil_does() {
    let r = reference();
    for (name, want) in r["images"].as_object().unwrap() {
        let bytes = std::fs::read(dir().join(name)).unwrap();
        let img = decode_image(&bytes, name, &Limits::default()).unwrap();
        assert_eq!(img.width as u64, want["width"].as_u64().unwrap(), "{name}");
        assert_eq!(
            img.height as u64,
            want["height"].as_u64().unwrap(),
            "{name}"
        );
        let mean = img.pixels.iter().map(|&p| p as f64).sum::<f64>() / img.pixels.len() as f64;
        let sha = format!("{:x}", Sha256::digest(&img.pixels));
        if name.ends_with(".png") || name.ends_with(".gif") || name.ends_with(".webp") {
            // Lossless and palette formats, and WebP's bit-exact lossy decoding: identical bytes.
            assert_eq!(sha, want["sha256"].as_str().unwrap(), "{name}");
        } else {
            // JPEG decoders may differ by a rounding step in the IDCT / colour conversion.
            let d = (mean - want["mean"].as_f64().unwrap()).abs();
            assert!(d < 0.5, "{name}: mean {mean} vs PIL {}", want["mean"]);
        }
    }
}

#[test]
fn speech_wav_resamples_to_16k_like_sox() {
    let r = reference();
    let wav = std::fs::read(dir().join("hello.wav")).unwrap();
    let w = decode_audio(&wav, "hello.wav", &Limits::default()).unwrap();
    assert_eq!(w.source_rate, 22050);
    let flac = std::fs::read(dir().join("hello16k.flac")).unwrap();
    let f = decode_audio(&flac, "hello16k.flac", &Limits::default()).unwrap();
    let frames = r["audio"]["hello16k.flac"]["frames"].as_u64().unwrap() as usize;
    assert_eq!((f.samples.len(), f.source_rate), (frames, 16000));
    assert_eq!(w.samples.len(), frames);
    // Two band-limited resamplers (rubato's FFT one, sox's): the same signal up to the filters'
    // transition bands; compared by the residual's energy relative to the signal's.
    let energy = |x: &[f32]| x.iter().map(|v| (*v as f64).powi(2)).sum::<f64>();
    let diff: Vec<f32> = w
        .samples
        .iter()
        .zip(&f.samples)
        .map(|(a, b)| a - b)
        .collect();
    let rel = (energy(&diff) / energy(&f.samples)).sqrt();
    assert!(rel < 0.05, "relative residual {rel}");
}
