//! Media inputs of a prompt, from bytes to soft tokens at their positions: decoding
//! ([`crate::media`]), encoding by the model's towers (cached by content hash), and the
//! placement of the soft tokens — either by expanding each marker the chat template wrote
//! (one placeholder id per input) into the model's `start, n × placeholder, end` ids, or, for
//! ids that already hold the expanded runs (`--tokens`), by filling the runs in order.
//!
//! A video is placed as its frame groups, each `<t seconds>` text (tokenized), `start`,
//! its soft tokens, `end`, and each group is a span of its own (with the grid of one group).

use crate::arch::multimodal::{MediaKind, MediaTowers};
use crate::error::{Error, Result};
use crate::media::{decode_audio, decode_image, decode_video, Limits, VideoClip};
use crate::plan::media::{MediaEmbeds, MediaSpan};
use crate::tokenizer::Tokenizer;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One media input encoded: its soft tokens `[n, dim]`, the hash of its bytes and, for
/// M-RoPE models, the soft tokens' `[rows, cols]` grid ([`MediaTowers::image_grid`]; for a
/// video, the grid of one frame group).
#[derive(Clone, Debug)]
pub struct EncodedMedia {
    pub kind: MediaKind,
    pub rows: Arc<Vec<f32>>,
    pub key: u64,
    pub grid: Option<[usize; 2]>,
    /// A video's frame groups: each one's time in seconds (empty for other kinds).
    pub seconds: Vec<f64>,
}

impl EncodedMedia {
    /// The runs of soft tokens this input is placed as: `(first row, rows)` — one per frame
    /// group of a video, else one.
    fn runs(&self, dim: usize) -> Vec<(usize, usize)> {
        let n = self.rows.len() / dim.max(1);
        let groups = self.seconds.len();
        if self.kind != MediaKind::Video || groups == 0 {
            return vec![(0, n)];
        }
        let per = n / groups;
        (0..groups).map(|g| (g * per, per)).collect()
    }

    /// The span of run `(first, len)` of this input (run `g`) starting at `start`, its soft
    /// tokens attending to each other both ways when `towers` say so.
    fn span(
        &self,
        towers: &dyn MediaTowers,
        start: usize,
        g: usize,
        (first, len): (usize, usize),
        dim: usize,
    ) -> MediaSpan {
        let whole = first == 0 && len * dim == self.rows.len();
        MediaSpan {
            start,
            rows: if whole {
                self.rows.clone()
            } else {
                Arc::new(self.rows[first * dim..(first + len) * dim].to_vec())
            },
            // Each group its own identity (equal keys and starts mean equal rows).
            key: self.key ^ (g as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            grid: self.grid,
            bidirectional: towers.bidirectional(self.kind),
        }
    }
}

/// The content hash of `bytes` of `kind` (64 bits of SHA-256).
pub fn media_key(kind: MediaKind, bytes: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(kind.name().as_bytes());
    h.update(bytes);
    let d = h.finalize();
    u64::from_le_bytes(d[..8].try_into().unwrap_or([0; 8]))
}

/// A bounded cache of encoder outputs by content hash (least recently used evicted), so a
/// conversation resending the same image does not encode it again.
pub struct MediaCache {
    cap: usize,
    map: Mutex<Lru>,
    /// Lookups answered from the cache, and inputs encoded through it.
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Encoded inputs by key, and the keys from least to most recently used.
type Lru = (HashMap<u64, EncodedMedia>, VecDeque<u64>);

impl MediaCache {
    /// A cache of at most `cap` inputs.
    pub fn new(cap: usize) -> Self {
        MediaCache {
            cap,
            map: Mutex::new((HashMap::new(), VecDeque::new())),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Inputs served from the cache (not encoded again) so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Inputs encoded through the cache (not found in it) so far.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Inputs held.
    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.0.len())
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, key: u64) -> Option<EncodedMedia> {
        let mut m = self.map.lock().ok()?;
        let hit = m.0.get(&key).cloned()?;
        m.1.retain(|k| *k != key);
        m.1.push_back(key);
        Some(hit)
    }

    fn put(&self, key: u64, media: EncodedMedia) {
        let Ok(mut m) = self.map.lock() else { return };
        if m.0.insert(key, media).is_none() {
            m.1.push_back(key);
        }
        while m.0.len() > self.cap {
            match m.1.pop_front() {
                Some(k) => {
                    m.0.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// Decodes and encodes one input (`name` in errors) with `towers`, through `cache` when given.
pub fn encode_media(
    towers: &dyn MediaTowers,
    kind: MediaKind,
    bytes: &[u8],
    name: &str,
    limits: &Limits,
    cache: Option<&MediaCache>,
) -> Result<EncodedMedia> {
    if !towers.accepts(kind) {
        return Err(Error::Request(format!(
            "{name}: this model does not take {} input",
            kind.name()
        )));
    }
    let key = media_key(kind, bytes);
    cached(cache, key, || {
        let (rows, grid, seconds) = match kind {
            MediaKind::Image => {
                let img = decode_image(bytes, name, limits)?;
                (
                    towers.encode_image(&img),
                    towers.image_grid(&img),
                    Vec::new(),
                )
            }
            MediaKind::Audio => (
                towers.encode_audio(&decode_audio(bytes, name, limits)?),
                None,
                Vec::new(),
            ),
            MediaKind::Video => {
                return encode_video(towers, &decode_video(bytes, name, limits)?, key, name);
            }
        };
        let rows = Arc::new(rows.map_err(|e| Error::Request(format!("{name}: {e}")))?);
        Ok(EncodedMedia {
            kind,
            rows,
            key,
            grid,
            seconds,
        })
    })
}

/// Encodes a decoded video (`name` in errors, `identity`: what identifies it, such as its
/// frames' bytes) with `towers`, through `cache` when given.
pub fn encode_video_clip(
    towers: &dyn MediaTowers,
    video: &VideoClip,
    identity: &[u8],
    name: &str,
    cache: Option<&MediaCache>,
) -> Result<EncodedMedia> {
    if !towers.accepts(MediaKind::Video) {
        return Err(Error::Request(format!(
            "{name}: this model does not take video input"
        )));
    }
    let key = media_key(MediaKind::Video, identity);
    cached(cache, key, || encode_video(towers, video, key, name))
}

fn encode_video(
    towers: &dyn MediaTowers,
    video: &VideoClip,
    key: u64,
    name: &str,
) -> Result<EncodedMedia> {
    let v = towers
        .encode_video(video)
        .map_err(|e| Error::Request(format!("{name}: {e}")))?;
    Ok(EncodedMedia {
        kind: MediaKind::Video,
        rows: Arc::new(v.rows),
        key,
        grid: Some(v.grid),
        seconds: v.seconds,
    })
}

/// `encode()`'s result for `key`, from `cache` when it holds it (then stored there).
fn cached(
    cache: Option<&MediaCache>,
    key: u64,
    encode: impl FnOnce() -> Result<EncodedMedia>,
) -> Result<EncodedMedia> {
    if let Some(c) = cache {
        if let Some(hit) = c.get(key) {
            c.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        c.misses.fetch_add(1, Ordering::Relaxed);
    }
    let media = encode()?;
    if let Some(c) = cache {
        c.put(key, media.clone());
    }
    Ok(media)
}

/// The `i`-th input of `kind` among `inputs`.
fn nth_of(inputs: &[EncodedMedia], kind: MediaKind, i: usize) -> Option<&EncodedMedia> {
    inputs.iter().filter(|m| m.kind == kind).nth(i)
}

fn count_error(kind: MediaKind, found: usize, given: usize, what: &str) -> Error {
    Error::Request(format!(
        "the prompt has {found} {} {what} for {given} {} input(s)",
        kind.name(),
        kind.name()
    ))
}

/// The `<t seconds>` text before a video frame group (`Qwen3VLProcessor`: `f"<{t:.1f}
/// seconds>"`; Rust's `{:.1}` rounds the exact value half to even, as Python does).
pub fn timestamp_text(seconds: f64) -> String {
    format!("<{seconds:.1} seconds>")
}

/// Expands each template marker of `ids` (one placeholder id per input, as the chat template
/// writes them) into the model's ids for the next input of that kind, with `dim`-wide soft
/// tokens placed there. A video's timestamp texts are tokenized with `tokenizer`.
pub fn expand_markers(
    ids: &[u32],
    towers: &dyn MediaTowers,
    inputs: &[EncodedMedia],
    dim: usize,
    tokenizer: Option<&Tokenizer>,
) -> Result<(Vec<u32>, MediaEmbeds)> {
    let kinds = MediaKind::ALL;
    let mut used = [0usize; MediaKind::ALL.len()];
    let mut out = Vec::with_capacity(ids.len());
    let mut spans = Vec::new();
    for &id in ids {
        let k = kinds
            .iter()
            .position(|&k| towers.accepts(k) && towers.tokens(k).placeholder == id);
        let Some(k) = k else {
            out.push(id);
            continue;
        };
        let kind = kinds[k];
        let given = inputs.iter().filter(|m| m.kind == kind).count();
        let m = nth_of(inputs, kind, used[k])
            .ok_or_else(|| count_error(kind, used[k] + 1, given, "marker(s)"))?;
        used[k] += 1;
        let t = towers.tokens(kind);
        for (g, run) in m.runs(dim).into_iter().enumerate() {
            if let Some(&s) = m.seconds.get(g) {
                let tok = tokenizer.ok_or_else(|| {
                    Error::Request("a video's timestamps need the model's tokenizer".into())
                })?;
                out.extend(
                    tok.encode(&timestamp_text(s), false)
                        .map_err(|e| Error::Request(e.to_string()))?,
                );
            }
            out.extend(t.start);
            spans.push(m.span(towers, out.len(), g, run, dim));
            out.extend(std::iter::repeat_n(t.placeholder, run.1));
            out.extend(t.end);
        }
    }
    for (k, &kind) in kinds.iter().enumerate() {
        let given = inputs.iter().filter(|m| m.kind == kind).count();
        if used[k] != given {
            return Err(count_error(kind, used[k], given, "marker(s)"));
        }
    }
    Ok((
        out,
        MediaEmbeds {
            spans,
            dim,
            input_id: towers.input_id(),
            mapped_ids: towers.mapped_ids(),
        },
    ))
}

/// Places the inputs on ids that already hold the expanded runs of placeholder ids (one run
/// per input, in order per kind): each run must be as long as its input's soft tokens.
pub fn fill_runs(
    ids: &[u32],
    towers: &dyn MediaTowers,
    inputs: &[EncodedMedia],
    dim: usize,
) -> Result<MediaEmbeds> {
    let mut spans = Vec::new();
    for kind in MediaKind::ALL {
        // Every run of soft tokens of this kind, in order, with its input.
        let wanted: Vec<(usize, &EncodedMedia, usize, (usize, usize))> = inputs
            .iter()
            .filter(|m| m.kind == kind)
            .enumerate()
            .flat_map(|(n, m)| {
                m.runs(dim)
                    .into_iter()
                    .enumerate()
                    .map(move |(g, r)| (n, m, g, r))
            })
            .collect();
        if wanted.is_empty() {
            continue;
        }
        let p = towers.tokens(kind).placeholder;
        let mut runs = Vec::new();
        let mut i = 0;
        while i < ids.len() {
            if ids[i] == p {
                let s = i;
                while i < ids.len() && ids[i] == p {
                    i += 1;
                }
                runs.push((s, i - s));
            } else {
                i += 1;
            }
        }
        if runs.len() != wanted.len() {
            let given = inputs.iter().filter(|m| m.kind == kind).count();
            if kind == MediaKind::Video {
                return Err(Error::Request(format!(
                    "the prompt has {} video placeholder run(s) for the {} frame group(s) of \
                     {given} video input(s) (one run per group)",
                    runs.len(),
                    wanted.len()
                )));
            }
            return Err(count_error(kind, runs.len(), given, "placeholder run(s)"));
        }
        for ((start, len), (n, m, g, run)) in runs.into_iter().zip(wanted) {
            if len != run.1 {
                return Err(Error::Request(format!(
                    "{} {}: its placeholder run at position {start} has {len} ids, the input \
                     gives {} soft tokens",
                    kind.name(),
                    n + 1,
                    run.1
                )));
            }
            spans.push(m.span(towers, start, g, run, dim));
        }
    }
    spans.sort_by_key(|s| s.start);
    Ok(MediaEmbeds {
        spans,
        dim,
        input_id: towers.input_id(),
        mapped_ids: towers.mapped_ids(),
    })
}

/// The content parts of a user turn with `media` (in order) before its `text`, as OpenAI
/// clients and transformers' processors write them (`{"type": "image"}`, then the text).
pub fn user_parts(media: &[MediaKind], text: &str) -> Vec<serde_json::Value> {
    let mut parts: Vec<serde_json::Value> = media
        .iter()
        .map(|k| serde_json::json!({ "type": k.name() }))
        .collect();
    parts.push(serde_json::json!({ "type": "text", "text": text }));
    parts
}
