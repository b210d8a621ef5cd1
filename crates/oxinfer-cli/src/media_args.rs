//! `--image FILE` / `--audio FILE` of `oxinfer run` and `chat`, and the chat's `/image PATH` /
//! `/audio PATH` commands: the files are decoded and encoded by the model's towers, then
//! placed in the prompt (the chat template's markers expanded, or with `--tokens` the runs of
//! placeholder ids already there filled in order).

use anyhow::{bail, Result};
use clap::Args;
use oxinfer::arch::multimodal::{MediaKind, MediaTowers};
use oxinfer::engine::media::{encode_media, expand_markers, fill_runs, EncodedMedia};
use oxinfer::media::{read_file, Limits};
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
}

impl MediaArgs {
    /// Whether no media was given.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty() && self.audio.is_empty()
    }

    /// Every input with its kind, images first.
    pub fn inputs(&self) -> Vec<(MediaKind, PathBuf)> {
        let im = self.images.iter().map(|p| (MediaKind::Image, p.clone()));
        let au = self.audio.iter().map(|p| (MediaKind::Audio, p.clone()));
        im.chain(au).collect()
    }
}

/// The model's towers, or why media cannot be given to it.
pub fn towers(model: &Model) -> Result<&dyn MediaTowers> {
    match model.lm().media() {
        Some(t) => Ok(t),
        None => bail!(
            "{} has no vision or audio tower: --image / --audio need a multimodal checkpoint \
             (for example a Gemma 4 safetensors folder with its vision tower)",
            crate::run::model_name(model)
        ),
    }
}

/// Decodes and encodes `inputs` in order.
pub fn encode(model: &Model, inputs: &[(MediaKind, PathBuf)]) -> Result<Vec<EncodedMedia>> {
    let t = towers(model)?;
    let mut out = Vec::with_capacity(inputs.len());
    for (kind, path) in inputs {
        out.push(encode_file(t, *kind, path)?);
    }
    Ok(out)
}

fn encode_file(t: &dyn MediaTowers, kind: MediaKind, path: &Path) -> Result<EncodedMedia> {
    let bytes = read_file(path)?;
    let name = path.display().to_string();
    Ok(encode_media(
        t,
        kind,
        &bytes,
        &name,
        &Limits::default(),
        None,
    )?)
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
    let (ids, m) = expand_markers(ids, towers(model)?, media, dim)?;
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
        bail!("--image / --audio go through the chat template (drop --raw) or into --tokens ids");
    }
    let media = encode(model, &m.inputs())?;
    if from_ids {
        let e = fill(model, &prompt, &media)?;
        Ok((prompt, Some(e)))
    } else {
        let (ids, e) = expand(model, &prompt, &media)?;
        Ok((ids, Some(e)))
    }
}

/// The media of a chat: `/image PATH` and `/audio PATH` attach an input to the next turn;
/// every turn's inputs stay placed in the conversation (encoded once).
#[derive(Default)]
pub struct ChatMedia {
    /// Attached, for the next turn.
    pending: Vec<EncodedMedia>,
    /// Of the turns so far, in order.
    all: Vec<EncodedMedia>,
    /// How many of `all` the last turn added.
    last_turn: usize,
}

impl ChatMedia {
    /// Handles `line` when it is `/image PATH` or `/audio PATH` (encoding the file now);
    /// returns whether it was one.
    pub fn command(&mut self, model: &Model, line: &str) -> Result<bool> {
        let (kind, path) = match line.split_once(char::is_whitespace) {
            Some(("/image", p)) => (MediaKind::Image, p.trim()),
            Some(("/audio", p)) => (MediaKind::Audio, p.trim()),
            _ if line == "/image" || line == "/audio" => bail!("{line} needs a file: {line} PATH"),
            _ => return Ok(false),
        };
        self.attach(model, kind, Path::new(path))?;
        Ok(true)
    }

    /// Encodes `path` and attaches it to the next turn.
    pub fn attach(&mut self, model: &Model, kind: MediaKind, path: &Path) -> Result<()> {
        let m = encode_file(towers(model)?, kind, path)?;
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

    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = ChatMedia::default();
    }
}
