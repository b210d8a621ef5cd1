//! The audio side of the tiny multimodal Gemma 4 checkpoint against transformers 5 float32
//! (references made by tools/ref/make_tiny_gemma4_audio.py): the log-mel features of an
//! espeak-ng clip (its last frame in the padding, so the masks drop a row), the conformer's
//! output and the soft tokens, the logits of a chat prompt with the clip (whole and chunked
//! prefill) and 32 greedy tokens through the generation loop.

mod common;

use common::{check_mixed_prompt, fixtures, max_abs_diff, read_npy_f32};
use oxinfer::arch::gemma::audio::{AudioConfig, AudioTower};
use oxinfer::arch::gemma::audio_features::AudioFeatureExtractor;
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::engine::media::{encode_media, EncodedMedia};
use oxinfer::error::LoadError;
use oxinfer::loader::safetensors::SafetensorsModel;
use oxinfer::media::{decode_audio, Limits};
use oxinfer::Model;
use serde_json::Value;
use std::path::PathBuf;

fn dir() -> PathBuf {
    fixtures().join("tiny_gemma4_mm")
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(dir().join(name)).unwrap()).unwrap()
}

fn speech() -> Vec<u8> {
    std::fs::read(dir().join("speech.wav")).unwrap()
}

fn extractor() -> AudioFeatureExtractor {
    AudioFeatureExtractor::from_json(Some(&json("processor_config.json"))).unwrap()
}

fn encoded(model: &Model) -> EncodedMedia {
    let towers = model.lm().media().expect("towers loaded");
    encode_media(
        towers,
        MediaKind::Audio,
        &speech(),
        "speech.wav",
        &Limits::default(),
        None,
    )
    .unwrap()
}

#[test]
fn mel_features_match_the_extractor() {
    let r = json("reference_audio.json");
    let wave = decode_audio(&speech(), "speech.wav", &Limits::default()).unwrap();
    assert_eq!(
        wave.samples.len() as u64,
        r["speech"]["samples"].as_u64().unwrap()
    );
    let mel = extractor().extract(&wave.samples).unwrap();
    let (shape, want) = read_npy_f32(&dir().join("mel_speech.npy"));
    assert_eq!([mel.valid.len(), mel.n_mel], [shape[0], shape[1]]);
    let valid = mel.valid.iter().filter(|v| **v).count() as u64;
    assert_eq!(valid, r["speech"]["valid_frames"].as_u64().unwrap());
    let d = max_abs_diff(&mel.values, &want);
    println!("mel features {shape:?}: max diff {d:e}");
    assert!(d <= 1e-5, "mel features differ by {d}");
}

#[test]
fn encoder_output_and_soft_tokens_match() {
    let config = json("config.json");
    let path = dir().join("config.json");
    let field = |what| LoadError::Field {
        path: path.clone(),
        what,
    };
    let cfg = AudioConfig::from_json(&config["audio_config"], &field).unwrap();
    let store = SafetensorsModel::open(&dir()).unwrap();
    let fe = extractor();
    let tower = AudioTower::load(
        &store,
        cfg,
        "model.audio_tower.",
        "model.embed_audio",
        32,
        fe.n_mel,
    )
    .unwrap();
    let wave = decode_audio(&speech(), "speech.wav", &Limits::default()).unwrap();
    let mel = fe.extract(&wave.samples).unwrap();
    let (shape, want) = read_npy_f32(&dir().join("audio_tower_speech.npy"));
    assert_eq!(AudioTower::soft_tokens(&mel.valid), shape[0]);
    let hidden = tower.encode_hidden(&mel).unwrap();
    let d = max_abs_diff(&hidden, &want);
    println!("conformer output {shape:?}: max diff {d:e}");
    assert!(d <= 1e-4, "conformer output differs by {d}");

    let model = Model::load(dir()).unwrap();
    let m = encoded(&model);
    let (shape, want) = read_npy_f32(&dir().join("audio_speech.npy"));
    assert_eq!(m.rows.len(), want.len(), "{shape:?}");
    let d = max_abs_diff(&m.rows, &want);
    println!("soft tokens {shape:?}: max diff {d:e}");
    assert!(d <= 1e-4, "soft tokens differ by {d}");
}

#[test]
fn audio_prompt_logits_and_greedy_match() {
    let model = Model::load(dir()).unwrap();
    let r = json("reference_audio.json");
    let inputs = vec![encoded(&model)];
    check_mixed_prompt(
        &model,
        &dir(),
        &r,
        "logits_audio.npy",
        &inputs,
        &[usize::MAX, 7],
        1e-4,
    );
}

#[test]
fn clips_too_short_or_silent_of_samples_fail_by_name() {
    let model = Model::load(dir()).unwrap();
    let towers = model.lm().media().unwrap();
    // 100 samples of 16 kHz audio: shorter than half a frame.
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
    for _ in 0..100 {
        w.write_sample(0i16).unwrap();
    }
    w.finalize().unwrap();
    let e = encode_media(
        towers,
        MediaKind::Audio,
        out.get_ref(),
        "tiny.wav",
        &Limits::default(),
        None,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("tiny.wav: "), "{e}");
    assert!(e.to_string().contains("too short"), "{e}");
}
