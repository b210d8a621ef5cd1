//! Media inputs of the vision and audio towers: images (PNG, JPEG, WebP, GIF's first frame)
//! decoded to RGB, videos (animated GIF / WebP / PNG, folders of frames) decoded to RGB
//! frames, audio (WAV, FLAC) decoded to 16 kHz mono, and `data:` URLs. Sizes are
//! checked against [`Limits`] from the headers, before any pixel or sample buffer is allocated.
//! Every error names the input it came from.

pub mod audio;
pub mod data_url;
pub mod image;
pub mod resize;
pub mod video;

pub use self::audio::{decode_audio, Waveform, AUDIO_RATE};
pub use self::image::{decode_image, RgbImage};
pub use self::resize::{resize_bicubic, resize_bicubic_torch, resized_bicubic};
pub use self::video::{decode_video, read_frame_dir, VideoClip};
pub use data_url::{parse_data_url, DataUrl};

/// What a media input may be at most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Width and height of an image, in pixels.
    pub max_side: u32,
    /// Pixels of an image (width × height).
    pub max_pixels: u64,
    /// Length of an audio clip, in seconds.
    pub max_audio_seconds: u32,
}

impl Default for Limits {
    /// 16384 px a side, 64 Mpx, 10 minutes of audio.
    fn default() -> Self {
        Limits {
            max_side: 16384,
            max_pixels: 64 << 20,
            max_audio_seconds: 600,
        }
    }
}

/// A media input that cannot be used.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[error("{input}: {what}")]
pub struct MediaError {
    /// The input's name (a path, `image 2`, a part of a request).
    pub input: String,
    /// What is wrong with it.
    pub what: String,
}

impl MediaError {
    /// An error about `input`.
    pub fn new(input: &str, what: impl Into<String>) -> Self {
        MediaError {
            input: input.to_string(),
            what: what.into(),
        }
    }
}

impl From<MediaError> for crate::Error {
    /// A bad media input is a bad request.
    fn from(e: MediaError) -> Self {
        crate::Error::Request(e.to_string())
    }
}

/// Reads the file at `path` (named by its path in errors).
pub fn read_file(path: &std::path::Path) -> Result<Vec<u8>, MediaError> {
    std::fs::read(path).map_err(|e| MediaError::new(&path.display().to_string(), e.to_string()))
}
