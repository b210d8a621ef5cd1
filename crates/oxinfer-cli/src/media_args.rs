//! `--image FILE` / `--audio FILE` / `--video PATH` of `oxinfer run` and `chat`, and the chat's
//! `/image PATH` / `/audio PATH` / `/video PATH` commands: the files are decoded and encoded by
//! the model's towers, then placed in the prompt (the chat template's markers expanded, or
//! with `--tokens` the runs of placeholder ids already there filled in order). A video is an
//! animated GIF / WebP / PNG, or a folder of still frames (file-name order, `--video-fps`).

use anyhow::{bail, Result};
use clap::Args;
use oxinfer::arch::multimodal::{MediaKind, MediaTowers};
use oxinfer::engine::media::{
    encode_media, encode_video_clip, expand_markers, fill_runs, EncodedMedia,
};
use oxinfer::media::{decode_video, read_file, read_frame_dir, Limits};
use oxinfer::plan::media::MediaEmbeds;
use oxinfer::Model;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Media inputs of one prompt.
#[derive(Args, Debug, Clone, Default)]
pub struct MediaArgs {
    /// An image for the prompt (PNG, JPEG, WebP, GIF; repeatable, in order).
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// An audio clip for the prompt (WAV or FLAC; repeatable, in order).
    #[arg(long = "audio", value_name = "FILE")]
    pub audio: Vec<PathBuf>,
    /// A video for the prompt: an animated GIF / WebP / PNG, or a folder of still frames in
    /// file-name order (repeatable, in order; Qwen 3.5).
    #[arg(long = "video", value_name = "PATH")]
    pub videos: Vec<PathBuf>,
    /// Frame rate of a --video folder of frames (default: unknown, which the processor takes
    /// as 24), or of an animated file instead of its frame delays.
    #[arg(long = "video-fps", value_name = "F")]
    pub video_fps: Option<f64>,
}

impl MediaArgs {
    /// Whether no media was given.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.audio.is_empty() && self.videos.is_empty()
    }

    /// Every input with its kind: images, then audio, then videos.
    pub fn inputs(&self) -> Vec<(MediaKind, PathBuf)> {
        let im = self.images.iter().map(|p| (MediaKind::Image, p.clone()));
        let au = self.audio.iter().map(|p| (MediaKind::Audio, p.clone()));
        let vi = self.videos.iter().map(|p| (MediaKind::Video, p.clone()));
        im.chain(au).chain(vi).collect()
    }
}

/// The model's towers, or why media cannot be given to it.
pub fn towers(model: &Model) -> Result<&dyn MediaTowers> {
    match model.lm().media() {
        Some(t) => Ok(t),
        None => bail!(
            "{} has no vision or audio tower: --image / --audio / --video need a multimodal \
             checkpoint (for example a Gemma 4 safetensors folder with its vision tower)",
            crate::run::model_name(model)
        ),
    }
}

/// Decodes and encodes `inputs` in order (`fps`: `--video-fps`).
pub fn encode(
    model: &Model,
    inputs: &[(MediaKind, PathBuf)],
    fps: Option<f64>,
) -> Result<Vec<EncodedMedia>> {
    let t = towers(model)?;
    let mut out = Vec::with_capacity(inputs.len());
    for (kind, path) in inputs {
        out.push(encode_file(t, *kind, path, fps)?);
    }
    Ok(out)
}

fn encode_file(
    t: &dyn MediaTowers,
    kind: MediaKind,
    path: &Path,
    fps: Option<f64>,
) -> Result<EncodedMedia> {
    let name = path.display().to_string();
    let lim = Limits::default();
    if kind == MediaKind::Video && path.is_dir() {
        let (clip, identity) = read_frame_dir(path, fps, &lim)?;
        return Ok(encode_video_clip(t, &clip, &identity, &name, None)?);
    }
    let bytes = read_file(path)?;
    if let (MediaKind::Video, Some(f)) = (kind, fps) {
        if !(f.is_finite() && f > 0.0) {
            bail!("--video-fps {f}: not a positive number");
        }
        let mut clip = decode_video(&bytes, &name, &lim)?;
        clip.fps = Some(f);
        let mut identity = bytes;
        identity.extend(f.to_le_bytes());
        return Ok(encode_video_clip(t, &clip, &identity, &name, None)?);
    }
    Ok(encode_media(t, kind, &bytes, &name, &lim, None)?)
}

/// Places `media` on `ids` that already hold the expanded placeholder runs (`--tokens`).
pub fn fill(model: &Model, ids: &[u32], media: &[EncodedMedia]) -> Result<Arc<MediaEmbeds>> {
    let dim = model.config().hidden_size;
    Ok(Arc::new(fill_runs(ids, towers(model)?, media, dim)?))
}

/// Expands the template markers of `ids` (a tokenized chat prompt) for `media`.
pub fn expand(
    model: &Model,
    ids: &[u32],
    media: &[EncodedMedia],
) -> Result<(Vec<u32>, Arc<MediaEmbeds>)> {
    let dim = model.config().hidden_size;
    let (ids, m) = expand_markers(ids, towers(model)?, media, dim, model.tokenizer())?;
    Ok((ids, Arc::new(m)))
}

/// The user turn of `text` with the media of `m` as content parts before it (plain text when
/// there are none).
pub fn user_message(text: &str, kinds: &[MediaKind]) -> oxinfer::ChatMessage {
    let mut msg = oxinfer::ChatMessage::new("user", text);
    if !kinds.is_empty() {
        msg.parts = Some(oxinfer::engine::media::user_parts(kinds, text));
    }
    msg
}

/// Encodes the media of `m` and places them in `prompt`: ids given with `--tokens` hold the
/// expanded placeholder runs already; a chat prompt holds one template marker per input.
/// Returns the prompt to run and the soft tokens (none without media).
pub fn place(
    model: &Model,
    m: &MediaArgs,
    prompt: Vec<u32>,
    from_ids: bool,
    raw: bool,
) -> Result<(Vec<u32>, Option<Arc<MediaEmbeds>>)> {
    if m.is_empty() {
        return Ok((prompt, None));
    }
    towers(model)?;
    if raw && !from_ids {
        bail!(
            "--image / --audio / --video go through the chat template (drop --raw) or into \
             --tokens ids"
        );
    }
    let media = encode(model, &m.inputs(), m.video_fps)?;
    if from_ids {
        let e = fill(model, &prompt, &media)?;
        Ok((prompt, Some(e)))
    } else {
        let (ids, e) = expand(model, &prompt, &media)?;
        Ok((ids, Some(e)))
    }
}

/// The media of a chat: `/image PATH`, `/audio PATH` and `/video PATH` attach an input to the
/// next turn; every turn's inputs stay placed in the conversation (encoded once).
#[derive(Default)]
pub struct ChatMedia {
    /// `--video-fps`, for the videos attached.
    video_fps: Option<f64>,
    /// Attached, for the next turn.
    pending: Vec<EncodedMedia>,
    /// Of the turns so far, in order.
    all: Vec<EncodedMedia>,
    /// How many of `all` the last turn added.
    last_turn: usize,
}

impl ChatMedia {
    /// No inputs yet; videos attached later read at `video_fps` (`--video-fps`).
    pub fn new(video_fps: Option<f64>) -> Self {
        ChatMedia {
            video_fps,
            ..ChatMedia::default()
        }
    }

    /// Handles `line` when it is `/image PATH`, `/audio PATH` or `/video PATH` (encoding the
    /// input now); returns whether it was one.
    pub fn command(&mut self, model: &Model, line: &str) -> Result<bool> {
        let (kind, path) = match line.split_once(char::is_whitespace) {
            Some(("/image", p)) => (MediaKind::Image, p.trim()),
            Some(("/audio", p)) => (MediaKind::Audio, p.trim()),
            Some(("/video", p)) => (MediaKind::Video, p.trim()),
            _ if matches!(line, "/image" | "/audio" | "/video") => {
                bail!("{line} needs a file: {line} PATH")
            }
            _ => return Ok(false),
        };
        self.attach(model, kind, Path::new(path))?;
        Ok(true)
    }

    /// Encodes `path` and attaches it to the next turn.
    pub fn attach(&mut self, model: &Model, kind: MediaKind, path: &Path) -> Result<()> {
        let m = encode_file(towers(model)?, kind, path, self.video_fps)?;
        eprintln!(
            "({} {} attached to the next message: {} soft tokens)",
            kind.name(),
            path.display(),
            m.rows.len() / model.config().hidden_size.max(1)
        );
        self.pending.push(m);
        Ok(())
    }

    /// The user turn of `text` with the attached inputs.
    pub fn user_message(&mut self, text: &str) -> oxinfer::ChatMessage {
        let kinds: Vec<MediaKind> = self.pending.iter().map(|m| m.kind).collect();
        self.last_turn = self.pending.len();
        self.all.append(&mut self.pending);
        user_message(text, &kinds)
    }

    /// The tokenized conversation with every turn's inputs placed.
    pub fn place(
        &self,
        model: &Model,
        ids: Vec<u32>,
    ) -> Result<(Vec<u32>, Option<Arc<MediaEmbeds>>)> {
        if self.all.is_empty() {
            return Ok((ids, None));
        }
        let (ids, m) = expand(model, &ids, &self.all)?;
        Ok((ids, Some(m)))
    }

    /// Forgets the last turn's inputs (its message was dropped).
    pub fn drop_last_turn(&mut self) {
        let keep = self.all.len() - self.last_turn.min(self.all.len());
        self.all.truncate(keep);
        self.last_turn = 0;
    }

    /// Forgets every input (the settings stay).
    pub fn clear(&mut self) {
        *self = ChatMedia::new(self.video_fps);
    }
}
