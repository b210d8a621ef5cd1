//! `data:` URLs (RFC 2397) as OpenAI clients send images: `data:image/png;base64,iVBOR…`.

use super::MediaError;
use base64::Engine;

/// A decoded `data:` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataUrl {
    /// The media type (`image/png`), lower-cased; empty when the URL gives none.
    pub mime: String,
    /// The payload bytes.
    pub bytes: Vec<u8>,
}

/// Decodes `url` (named `input` in errors). Only base64 payloads are accepted; remote
/// (`http:`/`https:`) URLs are refused: nothing is fetched.
pub fn parse_data_url(url: &str, input: &str) -> Result<DataUrl, MediaError> {
    let err = |what: &str| MediaError::new(input, what);
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https:/") {
        return Err(err(
            "remote URLs are not fetched; send the data as a data: URL",
        ));
    }
    let rest = url
        .strip_prefix("data:")
        .ok_or_else(|| err("not a data: URL"))?;
    let (meta, payload) = rest
        .split_once(',')
        .ok_or_else(|| err("data: URL without a ',' before its payload"))?;
    let mut parts = meta.split(';');
    let mime = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    if !parts.any(|p| p.trim().eq_ignore_ascii_case("base64")) {
        return Err(err("data: URL payload is not base64 (';base64' missing)"));
    }
    let clean: String = payload
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| MediaError::new(input, format!("bad base64 payload: {e}")))?;
    Ok(DataUrl { mime, bytes })
}

/// Decodes a bare base64 string (OpenAI `input_audio.data`), named `input` in errors.
pub fn decode_base64(data: &str, input: &str) -> Result<Vec<u8>, MediaError> {
    let clean: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| MediaError::new(input, format!("bad base64 data: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_base64_payload_and_type() {
        let u = parse_data_url("data:image/PNG;base64,aGVs bG8=", "x").unwrap();
        assert_eq!(u.mime, "image/png");
        assert_eq!(u.bytes, b"hello");
    }

    #[test]
    fn refuses_remote_plain_and_broken_urls() {
        let e = parse_data_url("https://example.com/a.png", "part 1").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("part 1: remote URLs are not fetched"),
            "{e}"
        );
        assert!(parse_data_url("data:text/plain,hello", "x").is_err());
        assert!(parse_data_url("data:image/png;base64", "x").is_err());
        assert!(parse_data_url("data:image/png;base64,@@@", "x").is_err());
        assert!(parse_data_url("file:///etc/passwd", "x").is_err());
    }
}
