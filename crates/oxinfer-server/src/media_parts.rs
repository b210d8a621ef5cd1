//! Images, audio and videos in chat requests: OpenAI's content parts
//! `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}` and
//! `{"type": "input_audio", "input_audio": {"data": "<base64>", "format": "wav"}}`, and the
//! `{"type": "video_url", "video_url": {"url": "data:image/gif;base64,..."}}` part vLLM-style
//! servers take (an animated GIF, WebP or PNG here).
//!
//! Each part becomes a `{"type": "image"}` / `{"type": "audio"}` / `{"type": "video"}` part
//! for the chat template
//! (which writes the model's marker there) and a media input, decoded and encoded by the
//! model's towers before the request is queued; the encoded soft tokens ride with the
//! sequence through continuous batching ([`oxinfer::plan::media`]). Encoder outputs are kept
//! in a bounded cache keyed by content hash ([`MEDIA_CACHE_ENTRIES`] inputs), so a
//! conversation that resends the same image each turn encodes it once. Only `data:` URLs and
//! inline base64 are read: the server fetches nothing from the network.

use crate::api::{Content, Message, Part};
use crate::error::ApiError;
use oxinfer::arch::multimodal::MediaKind;
use oxinfer::engine::media::{encode_media, expand_markers, EncodedMedia, MediaCache};
use oxinfer::media::data_url::{decode_base64, parse_data_url};
use oxinfer::media::Limits;
use oxinfer::plan::media::MediaEmbeds;
use oxinfer::Model;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::sync::Arc;

/// Encoded inputs the server keeps (least recently used evicted). An entry holds one input's
/// soft tokens: `n × hidden` floats (a Gemma 4 E2B image at its default budget: 280 × 1536
/// floats, 1.7 MB), so the cache stays under ~55 MB for such a model.
pub const MEDIA_CACHE_ENTRIES: usize = 32;

/// One media part of a request, decoded from its base64 payload (not yet from its format).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaInput {
    pub kind: MediaKind,
    pub bytes: Vec<u8>,
    /// Where it sits in the request (`messages[1].content[0]`), for errors.
    pub name: String,
}

/// The content parts of `content` as the chat template reads them: text parts as given,
/// `image_url` as `{"type": "image"}`, `input_audio` as `{"type": "audio"}`, `video_url` as
/// `{"type": "video"}`. Content without
/// media stays one string (the text parts joined), as before.
pub fn template_content(content: Option<&Content>, i: usize) -> Result<Value, ApiError> {
    let param = || format!("messages[{i}].content");
    match content {
        None => Ok(json!("")),
        Some(c) if !c.has_media() => c
            .text()
            .map(Value::String)
            .map_err(|e| ApiError::bad_request(e).with_param(param())),
        Some(Content::Text(s)) => Ok(json!(s)),
        Some(Content::Parts(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let kind = part_kind(p, i, j)?;
                Ok(match kind {
                    None => json!({"type": "text", "text": p.text.clone().unwrap_or_default()}),
                    Some(k) => json!({"type": k.name()}),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
    }
}

/// `None` for a text part, else the media kind of part `j` of message `i`; 400 naming the
/// part for an unknown type or a text part without text.
fn part_kind(p: &Part, i: usize, j: usize) -> Result<Option<MediaKind>, ApiError> {
    let param = format!("messages[{i}].content[{j}]");
    match p.kind.as_str() {
        "text" if p.text.is_some() => Ok(None),
        "text" => Err(
            ApiError::bad_request(format!("{param}: a text part needs 'text'")).with_param(param),
        ),
        "image_url" => Ok(Some(MediaKind::Image)),
        "input_audio" => Ok(Some(MediaKind::Audio)),
        "video_url" => Ok(Some(MediaKind::Video)),
        other => Err(ApiError::bad_request(format!(
            "{param}: content part of type '{other}' is not supported (text, image_url, \
             input_audio, video_url)"
        ))
        .with_param(param)),
    }
}

/// The media parts of `msgs`, in the order the chat template meets them, with their payloads
/// decoded from base64. 400 naming the part for a remote URL (nothing is fetched), a
/// malformed part, bad base64 or an audio format other than WAV and FLAC.
pub fn media_inputs(msgs: &[Message]) -> Result<Vec<MediaInput>, ApiError> {
    let mut out = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let Some(Content::Parts(parts)) = &m.content else {
            continue;
        };
        for (j, p) in parts.iter().enumerate() {
            let Some(kind) = part_kind(p, i, j)? else {
                continue;
            };
            let name = format!("messages[{i}].content[{j}]");
            let bad = |what: String| {
                ApiError::bad_request(format!("{name}: {what}")).with_param(name.clone())
            };
            let bytes = match kind {
                MediaKind::Image | MediaKind::Video => {
                    let (field, what) = match kind {
                        MediaKind::Image => ("image_url", "image"),
                        _ => ("video_url", "video"),
                    };
                    let part = if kind == MediaKind::Image {
                        &p.image_url
                    } else {
                        &p.video_url
                    };
                    let url = part
                        .as_ref()
                        .and_then(|v| v.get("url").or(Some(v)))
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad(format!("the {field} part needs {field}.url")))?;
                    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
                    if lower.starts_with("http://") || lower.starts_with("https:/") {
                        return Err(bad(format!(
                            "remote {what} URLs are refused: this server makes no network \
                             fetches; send the {what} inline as a data: URL \
                             (data:image/{}base64,...)",
                            if kind == MediaKind::Image {
                                "png;"
                            } else {
                                "gif;"
                            }
                        )));
                    }
                    parse_data_url(url, &name).map_err(|e| bad(e.what))?.bytes
                }
                MediaKind::Audio => {
                    let a = p.input_audio.as_ref();
                    let data = a
                        .and_then(|v| v.get("data"))
                        .and_then(Value::as_str)
                        .ok_or_else(|| bad("an input_audio part needs input_audio.data".into()))?;
                    let format = a.and_then(|v| v.get("format")).and_then(Value::as_str);
                    if let Some(f) = format.filter(|f| !matches!(*f, "wav" | "flac")) {
                        return Err(bad(format!(
                            "audio format '{f}' is not supported (wav and flac are)"
                        )));
                    }
                    decode_base64(data, &name).map_err(|e| bad(e.what))?
                }
            };
            out.push(MediaInput { kind, bytes, name });
        }
    }
    Ok(out)
}

/// Encodes `inputs` with `model`'s towers (through `cache`), in order. 400 naming the part
/// for a model without the tower an input needs and for an input that cannot be decoded.
pub fn encode(
    model: &Model,
    cache: &MediaCache,
    inputs: &[MediaInput],
) -> Result<Vec<EncodedMedia>, ApiError> {
    let towers = model.lm().media();
    let mut encoded = Vec::with_capacity(inputs.len());
    for m in inputs {
        let t = match towers {
            Some(t) if t.accepts(m.kind) => t,
            _ => {
                let why = match m.kind {
                    MediaKind::Image => {
                        "this model has no vision tower, so it cannot take image \
                                         input"
                    }
                    MediaKind::Audio => {
                        "this model has no audio tower, so it cannot take audio \
                                         input"
                    }
                    MediaKind::Video => {
                        "this model cannot take video input (Qwen 3.5 vision \
                                         checkpoints can)"
                    }
                };
                return Err(ApiError::bad_request(format!("{}: {why}", m.name))
                    .with_param(m.name.clone())
                    .with_code("model_not_supported"));
            }
        };
        let e = encode_media(
            t,
            m.kind,
            &m.bytes,
            &m.name,
            &Limits::default(),
            Some(cache),
        )
        .map_err(|e| ApiError::bad_request(e.to_string()).with_param(m.name.clone()))?;
        encoded.push(e);
    }
    Ok(encoded)
}

/// Places `encoded` (from [`encode`], not empty) on the tokenized prompt `ids`, which holds
/// one template marker per input: the expanded ids and the soft tokens.
pub fn place(
    model: &Model,
    encoded: &[EncodedMedia],
    ids: &[u32],
) -> Result<(Vec<u32>, Arc<MediaEmbeds>), ApiError> {
    let towers = model
        .lm()
        .media()
        .ok_or_else(|| ApiError::internal("media were encoded for a model without towers"))?;
    let dim = model.config().hidden_size;
    let (ids, embeds) = expand_markers(ids, towers, encoded, dim, model.tokenizer())
        .map_err(|e| ApiError::bad_request(e.to_string()).with_param("messages"))?;
    Ok((ids, Arc::new(embeds)))
}

/// The media cache's lines of `/metrics`: inputs encoded, inputs served from the cache, and
/// inputs held.
pub fn render_metrics(cache: &MediaCache, out: &mut String) {
    let lines = [
        (
            "oxinfer_media_encoded_total",
            "counter",
            "Media inputs (images, audio) run through the model's towers.",
            cache.misses() as f64,
        ),
        (
            "oxinfer_media_cache_hits_total",
            "counter",
            "Media inputs whose encoder output came from the cache (not encoded again).",
            cache.hits() as f64,
        ),
        (
            "oxinfer_media_cache_entries",
            "gauge",
            "Encoded media inputs held in the cache.",
            cache.len() as f64,
        ),
    ];
    for (name, kind, help, v) in lines {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(v: Value) -> Vec<Message> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn parts_become_template_parts_and_inputs_in_order() {
        let m = msgs(json!([{"role": "user", "content": [
            {"type": "text", "text": "Look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
            {"type": "input_audio", "input_audio": {"data": "aGV5", "format": "wav"}},
            {"type": "video_url", "video_url": {"url": "data:image/gif;base64,R0lG"}},
        ]}]));
        let t = template_content(m[0].content.as_ref(), 0).unwrap();
        assert_eq!(
            t,
            json!([{"type": "text", "text": "Look"}, {"type": "image"}, {"type": "audio"},
                   {"type": "video"}])
        );
        let inputs = media_inputs(&m).unwrap();
        assert_eq!(inputs.len(), 3);
        assert_eq!(
            (inputs[2].kind, &inputs[2].bytes[..]),
            (MediaKind::Video, &b"GIF"[..])
        );
        assert_eq!(
            (inputs[0].kind, &inputs[0].bytes[..]),
            (MediaKind::Image, &b"hi"[..])
        );
        assert_eq!(
            (inputs[1].kind, &inputs[1].bytes[..]),
            (MediaKind::Audio, &b"hey"[..])
        );
        assert_eq!(inputs[1].name, "messages[0].content[2]");
    }

    #[test]
    fn text_only_parts_stay_one_string() {
        let m = msgs(json!([{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]));
        assert_eq!(
            template_content(m[0].content.as_ref(), 0).unwrap(),
            json!("ab")
        );
    }

    #[test]
    fn remote_urls_bad_base64_and_odd_parts_are_refused_by_name() {
        let one = |part: Value| {
            media_inputs(&msgs(json!([{"role": "user", "content": [part]}])))
                .unwrap_err()
                .message
        };
        let e = one(json!({"type": "image_url", "image_url": {"url": "https://x.org/a.png"}}));
        assert!(
            e.contains("messages[0].content[0]: remote image URLs are refused"),
            "{e}"
        );
        assert!(e.contains("no network fetches"), "{e}");
        let e = one(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}));
        assert!(e.contains("bad base64"), "{e}");
        let e =
            one(json!({"type": "input_audio", "input_audio": {"data": "aGk=", "format": "mp3"}}));
        assert!(e.contains("audio format 'mp3' is not supported"), "{e}");
        let e = one(json!({"type": "image_url"}));
        assert!(e.contains("needs image_url.url"), "{e}");
        let e = one(json!({"type": "video_url", "video_url": {"url": "http://x.org/a.gif"}}));
        assert!(
            e.contains("messages[0].content[0]: remote video URLs are refused"),
            "{e}"
        );
        let e = one(json!({"type": "video_url"}));
        assert!(e.contains("the video_url part needs video_url.url"), "{e}");
        let e = one(json!({"type": "input_video"}));
        assert!(e.contains("'input_video' is not supported"), "{e}");
    }
}
