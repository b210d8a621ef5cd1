//! What a model with media towers offers the engine and the front ends: how many soft tokens
//! an input becomes, the token ids that stand for it in a prompt, and its encoding into rows
//! of the text model's embedding space.

use crate::media::{RgbImage, VideoClip, Waveform};

/// A kind of media input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MediaKind {
    Image,
    Audio,
    /// A sequence of frames (Qwen 3.5: encoded two frames at a time, one soft-token group per
    /// frame pair, each preceded by its timestamp text).
    Video,
}

impl MediaKind {
    /// Every kind, in the order inputs are given on the command line.
    pub const ALL: [MediaKind; 3] = [MediaKind::Image, MediaKind::Audio, MediaKind::Video];

    /// `image`, `audio` or `video`, for messages (and the chat templates' content part type).
    pub fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Audio => "audio",
            MediaKind::Video => "video",
        }
    }
}

/// The ids that stand for one input in a prompt: `start`, `count` × `placeholder`, `end`
/// (for a video: per frame group, after its timestamp text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MediaTokens {
    pub start: Option<u32>,
    pub placeholder: u32,
    pub end: Option<u32>,
}

/// The media towers of a multimodal model.
pub trait MediaTowers: Send + Sync {
    /// Whether inputs of `kind` can be encoded.
    fn accepts(&self, kind: MediaKind) -> bool;

    /// The token ids of an input of `kind`.
    fn tokens(&self, kind: MediaKind) -> MediaTokens;

    /// The text the chat template writes where an input of `kind` goes (Gemma 4:
    /// `<|image|>`), which the prompt builder replaces by the expanded ids.
    fn template_marker(&self, kind: MediaKind) -> &str;

    /// The id fed to the token-indexed inputs (embedding lookup, per-layer embeddings) at
    /// placeholder positions; their embeddings are then replaced by the soft tokens.
    fn input_id(&self) -> u32;

    /// Ids that read as [`Self::input_id`] wherever they appear, generated ones included.
    fn mapped_ids(&self) -> Vec<u32> {
        Vec::new()
    }

    /// Whether the soft tokens of an input of `kind` attend to each other both ways (a
    /// prompt's run of them is one group of the text model's mask,
    /// [`crate::plan::media::MediaEmbeds::groups`]); `false` (the default): causally.
    fn bidirectional(&self, kind: MediaKind) -> bool {
        let _ = kind;
        false
    }

    /// Encodes an image: soft tokens `[n, hidden]` of the text model.
    fn encode_image(&self, img: &RgbImage) -> Result<Vec<f32>, String>;

    /// The `[rows, cols]` grid (row-major) of the `n` soft tokens `img` becomes, for models
    /// whose text positions are multimodal rotary (M-RoPE: Qwen 3.5), where the soft tokens
    /// take 2-D positions; `None` (the default): plain positions.
    fn image_grid(&self, img: &RgbImage) -> Option<[usize; 2]> {
        let _ = img;
        None
    }

    /// Encodes a video: its soft tokens per frame group and where each group sits in time.
    fn encode_video(&self, video: &VideoClip) -> Result<EncodedVideo, String> {
        let _ = video;
        Err("this model has no video input".into())
    }

    /// Encodes 16 kHz mono audio: soft tokens `[n, hidden]`.
    fn encode_audio(&self, audio: &Waveform) -> Result<Vec<f32>, String> {
        let _ = audio;
        Err("this model has no audio tower".into())
    }
}

/// A video through the towers: `groups` frame groups of `grid` soft tokens each.
#[derive(Clone, Debug, PartialEq)]
pub struct EncodedVideo {
    /// `[groups · rows · cols, hidden]` soft tokens, group after group (each row-major).
    pub rows: Vec<f32>,
    /// Each group's soft tokens as a `[rows, cols]` grid.
    pub grid: [usize; 2],
    /// Each group's time in seconds (the mean of its first and last frame's times), as the
    /// prompt's `<t seconds>` text gives it.
    pub seconds: Vec<f64>,
}
