//! Media inputs of a prompt, from bytes to soft tokens at their positions: decoding
//! ([`crate::media`]), encoding by the model's towers (cached by content hash), and the
//! placement of the soft tokens — either by expanding each marker the chat template wrote
//! (one placeholder id per input) into the model's `start, n × placeholder, end` ids, or, for
//! ids that already hold the expanded runs (`--tokens`), by filling the runs in order.

use crate::arch::multimodal::{MediaKind, MediaTowers};
use crate::error::{Error, Result};
use crate::media::{decode_audio, decode_image, Limits};
use crate::plan::media::{MediaEmbeds, MediaSpan};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One media input encoded: its soft tokens `[n, dim]`, the hash of its bytes and, for
/// M-RoPE models, the soft tokens' `[rows, cols]` grid ([`MediaTowers::image_grid`]).
#[derive(Clone, Debug)]
pub struct EncodedMedia {
    pub kind: MediaKind,
    pub rows: Arc<Vec<f32>>,
    pub key: u64,
    pub grid: Option<[usize; 2]>,
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
    if let Some(c) = cache {
        if let Some(hit) = c.get(key) {
            c.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit);
        }
        c.misses.fetch_add(1, Ordering::Relaxed);
    }
    let (rows, grid) = match kind {
        MediaKind::Image => {
            let img = decode_image(bytes, name, limits)?;
            (towers.encode_image(&img), towers.image_grid(&img))
        }
        MediaKind::Audio => (
            towers.encode_audio(&decode_audio(bytes, name, limits)?),
            None,
        ),
    };
    let rows = Arc::new(rows.map_err(|e| Error::Request(format!("{name}: {e}")))?);
    let media = EncodedMedia {
        kind,
        rows,
        key,
        grid,
    };
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

/// Expands each template marker of `ids` (one placeholder id per input, as the chat template
/// writes them) into the model's ids for the next input of that kind, with `dim`-wide soft
/// tokens placed there.
pub fn expand_markers(
    ids: &[u32],
    towers: &dyn MediaTowers,
    inputs: &[EncodedMedia],
    dim: usize,
) -> Result<(Vec<u32>, MediaEmbeds)> {
    let kinds = [MediaKind::Image, MediaKind::Audio];
    let mut used = [0usize; 2];
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
        out.extend(t.start);
        spans.push(MediaSpan {
            start: out.len(),
            rows: m.rows.clone(),
            key: m.key,
            grid: m.grid,
        });
        out.extend(std::iter::repeat_n(
            t.placeholder,
            m.rows.len() / dim.max(1),
        ));
        out.extend(t.end);
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
    for kind in [MediaKind::Image, MediaKind::Audio] {
        let given = inputs.iter().filter(|m| m.kind == kind).count();
        if given == 0 {
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
        if runs.len() != given {
            return Err(count_error(kind, runs.len(), given, "placeholder run(s)"));
        }
        for (n, ((start, len), m)) in runs
            .into_iter()
            .zip(inputs.iter().filter(|m| m.kind == kind))
            .enumerate()
        {
            let want = m.rows.len() / dim.max(1);
            if len != want {
                return Err(Error::Request(format!(
                    "{} {}: its placeholder run at position {start} has {len} ids, the input \
                     gives {want} soft tokens",
                    kind.name(),
                    n + 1
                )));
            }
            spans.push(MediaSpan {
                start,
                rows: m.rows.clone(),
                key: m.key,
                grid: m.grid,
            });
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
