//! Audio decoding: WAV (PCM 8/16/24/32-bit integer, 32-bit float) and FLAC to mono `f32` at
//! 16 kHz, the rate the audio towers read. Channels are averaged; other rates are resampled
//! (rubato's FFT resampler, band-limited). The length is checked from the header first.

use super::{Limits, MediaError};
use rubato::{FftFixedIn, Resampler};
use std::io::Cursor;

/// The sample rate of a decoded [`Waveform`], in Hz.
pub const AUDIO_RATE: u32 = 16_000;

/// Mono samples in [-1, 1] at [`AUDIO_RATE`].
#[derive(Clone, Debug, PartialEq)]
pub struct Waveform {
    pub samples: Vec<f32>,
    /// The rate the input was stored at, in Hz.
    pub source_rate: u32,
}

/// Decodes WAV or FLAC `bytes` (named `input` in errors) to 16 kHz mono.
pub fn decode_audio(bytes: &[u8], input: &str, limits: &Limits) -> Result<Waveform, MediaError> {
    let err = |what: String| MediaError::new(input, what);
    if bytes.is_empty() {
        return Err(err("empty audio (0 bytes)".into()));
    }
    let (interleaved, channels, rate) = if bytes.starts_with(b"RIFF") {
        decode_wav(bytes, input, limits)?
    } else if bytes.starts_with(b"fLaC") {
        decode_flac(bytes, input, limits)?
    } else {
        return Err(err(
            "unsupported audio format (WAV and FLAC are supported)".into()
        ));
    };
    let frames = interleaved.len() / channels;
    if frames == 0 {
        return Err(err("audio without samples".into()));
    }
    let mono: Vec<f32> = interleaved
        .chunks_exact(channels)
        .map(|f| f.iter().sum::<f32>() / channels as f32)
        .collect();
    let samples = if rate == AUDIO_RATE {
        mono
    } else {
        resample(&mono, rate, AUDIO_RATE).map_err(|e| err(format!("resampling: {e}")))?
    };
    Ok(Waveform {
        samples,
        source_rate: rate,
    })
}

/// Refuses `frames` frames at `rate` Hz over the limit, or a zero rate or channel count.
fn check_length(
    frames: u64,
    rate: u32,
    channels: usize,
    input: &str,
    limits: &Limits,
) -> Result<(), MediaError> {
    if rate == 0 || channels == 0 {
        return Err(MediaError::new(
            input,
            format!("{channels} channels at {rate} Hz"),
        ));
    }
    if frames > limits.max_audio_seconds as u64 * rate as u64 {
        return Err(MediaError::new(
            input,
            format!(
                "audio of {:.1} s is too long (at most {} s)",
                frames as f64 / rate as f64,
                limits.max_audio_seconds
            ),
        ));
    }
    Ok(())
}

type Decoded = (Vec<f32>, usize, u32);

fn decode_wav(bytes: &[u8], input: &str, limits: &Limits) -> Result<Decoded, MediaError> {
    let err = |e: hound::Error| MediaError::new(input, format!("cannot decode WAV: {e}"));
    let reader = hound::WavReader::new(Cursor::new(bytes)).map_err(err)?;
    let spec = reader.spec();
    let channels = spec.channels as usize;
    check_length(
        reader.duration() as u64,
        spec.sample_rate,
        channels,
        input,
        limits,
    )?;
    let samples: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => reader
            .into_samples::<f32>()
            .collect::<Result<_, _>>()
            .map_err(err)?,
        hound::SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            reader
                .into_samples::<i32>()
                .map(|s| s.map(|v| v as f32 * scale))
                .collect::<Result<_, _>>()
                .map_err(err)?
        }
    };
    Ok((samples, channels, spec.sample_rate))
}

fn decode_flac(bytes: &[u8], input: &str, limits: &Limits) -> Result<Decoded, MediaError> {
    let err = |e: claxon::Error| MediaError::new(input, format!("cannot decode FLAC: {e}"));
    let mut reader = claxon::FlacReader::new(Cursor::new(bytes)).map_err(err)?;
    let info = reader.streaminfo();
    let channels = info.channels as usize;
    let frames = info.samples.unwrap_or(0);
    check_length(frames, info.sample_rate, channels, input, limits)?;
    let scale = 1.0 / (1u64 << (info.bits_per_sample - 1)) as f32;
    let samples: Vec<f32> = reader
        .samples()
        .map(|s| s.map(|v| v as f32 * scale))
        .collect::<Result<_, _>>()
        .map_err(err)?;
    // A stream without a sample count in its header is checked once decoded.
    check_length(
        (samples.len() / channels) as u64,
        info.sample_rate,
        channels,
        input,
        limits,
    )?;
    Ok((samples, channels, info.sample_rate))
}

/// Resamples mono `x` from `from` Hz to `to` Hz: `round(len · to / from)` samples, aligned
/// (the resampler's delay removed).
fn resample(x: &[f32], from: u32, to: u32) -> Result<Vec<f32>, String> {
    const CHUNK: usize = 1024;
    let mut r = FftFixedIn::<f32>::new(from as usize, to as usize, CHUNK, 2, 1)
        .map_err(|e| e.to_string())?;
    let want = (x.len() as u64 * to as u64).div_ceil(from as u64) as usize;
    let delay = r.output_delay();
    let mut out = Vec::with_capacity(want + delay + CHUNK);
    let mut at = 0;
    while out.len() < want + delay {
        let n = r.input_frames_next();
        let piece = if at + n <= x.len() {
            r.process(&[&x[at..at + n]], None)
        } else {
            match &x[at.min(x.len())..] {
                [] => r.process_partial(None::<&[&[f32]]>, None),
                tail => r.process_partial(Some(&[tail]), None),
            }
        }
        .map_err(|e| e.to_string())?;
        at += n;
        out.extend_from_slice(&piece[0]);
    }
    Ok(out[delay..delay + want].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wav(rate: u32, channels: u16, frames: usize, f: impl Fn(usize) -> f32) -> Vec<u8> {
        let spec = hound::WavSpec {
            channels,
            sample_rate: rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut out = Cursor::new(Vec::new());
        let mut w = hound::WavWriter::new(&mut out, spec).unwrap();
        for i in 0..frames {
            for _ in 0..channels {
                w.write_sample((f(i) * 32767.0) as i16).unwrap();
            }
        }
        w.finalize().unwrap();
        out.into_inner()
    }

    #[test]
    fn wav_at_16k_is_read_as_is_and_stereo_is_averaged() {
        let b = wav(16000, 2, 100, |i| (i as f32 / 100.0) - 0.5);
        let w = decode_audio(&b, "a.wav", &Limits::default()).unwrap();
        assert_eq!(w.samples.len(), 100);
        assert!((w.samples[10] - (0.1 - 0.5)).abs() < 1e-4);
    }

    #[test]
    fn resampling_keeps_a_tone_and_the_length() {
        // 0.5 s of 440 Hz at 44.1 kHz -> 8000 samples at 16 kHz, still a 440 Hz sine.
        let tone = |rate: f32| {
            move |i: usize| 0.5 * (2.0 * std::f32::consts::PI * 440.0 * i as f32 / rate).sin()
        };
        let b = wav(44100, 1, 22050, tone(44100.0));
        let w = decode_audio(&b, "t.wav", &Limits::default()).unwrap();
        assert_eq!((w.samples.len(), w.source_rate), (8000, 44100));
        let err = w.samples[200..7800]
            .iter()
            .enumerate()
            .map(|(k, v)| (v - tone(16000.0)(k + 200)).abs())
            .fold(0f32, f32::max);
        assert!(err < 2e-3, "max deviation from the sine {err}");
    }

    #[test]
    fn empty_truncated_long_and_unknown_inputs_fail_by_name() {
        let lim = Limits::default();
        let e = decode_audio(&[], "z.wav", &lim).unwrap_err();
        assert_eq!(e.to_string(), "z.wav: empty audio (0 bytes)");
        let b = wav(16000, 1, 0, |_| 0.0);
        let e = decode_audio(&b, "zero.wav", &lim).unwrap_err();
        assert_eq!(e.to_string(), "zero.wav: audio without samples");
        let b = wav(16000, 1, 1000, |_| 0.1);
        let e = decode_audio(&b[..30], "cut.wav", &lim).unwrap_err();
        assert!(
            e.to_string().starts_with("cut.wav: cannot decode WAV"),
            "{e}"
        );
        let short = Limits {
            max_audio_seconds: 1,
            ..lim
        };
        let b = wav(8000, 1, 16000, |_| 0.1);
        let e = decode_audio(&b, "long.wav", &short).unwrap_err();
        assert!(e.to_string().contains("audio of 2.0 s is too long"), "{e}");
        let e = decode_audio(b"OggS....", "a.ogg", &lim).unwrap_err();
        assert!(e.to_string().contains("unsupported audio format"), "{e}");
    }
}
