//! The Hub's HTTP API, the requests `huggingface_hub` 2.4 makes (the ground truth:
//! `hf_api.py` `model_info`, `file_download.py` `get_hf_file_metadata` / `http_get`,
//! `utils/_http.py` `_httpx2_follow_hub_redirects_with_backoff`):
//!
//! 1. `GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true` → JSON with `sha` (the
//!    commit) and `siblings[].rfilename` (the file list).
//! 2. `HEAD {endpoint}/{repo}/resolve/{rev}/{file}` with `Accept-Encoding: identity`, following
//!    redirects only while they stay on the Hub's host: the metadata is `X-Repo-Commit`,
//!    `X-Linked-Etag` (else `ETag`; the LFS SHA-256 for large files), `X-Linked-Size` (else
//!    `Content-Length`) and `Location` (the CDN address to download from).
//! 3. `GET <location>` with `Range: bytes=<have>-` to resume `blobs/<etag>.incomplete`: 206
//!    with the rest, 200 with everything (a server that ignores Range), or 416 with
//!    `Content-Range: bytes */<size>` when `<have>` is at or past the end of its copy.
//!
//! Errors: 401/403 → [`HubError::Gated`], 404 → [`HubError::NotOnHub`]. The token goes only to
//! the Hub's own host, never to the CDN (as `huggingface_hub` does).

use std::io::Read;

use super::config::HfConfig;
use crate::hub::{HubError, CONNECT_TIMEOUT};

/// Redirects followed on the Hub's own host (renamed repositories) before giving up.
const MAX_HUB_REDIRECTS: usize = 5;

/// A repository's commit and file list at a revision.
#[derive(Debug, Clone)]
pub struct RepoInfo {
    /// The 40-hex commit the revision points at.
    pub commit: String,
    /// Every file's path in the repository.
    pub files: Vec<String>,
}

/// What the Hub says about one file before it is downloaded.
#[derive(Debug, Clone)]
pub struct FileMeta {
    /// The commit the revision points at (`X-Repo-Commit`).
    pub commit: String,
    /// `X-Linked-Etag` or `ETag`, unquoted: the SHA-256 of an LFS file, the git blob hash of a
    /// small one. Names the blob in the cache.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Where to GET the contents (the CDN for LFS files).
    pub location: String,
}

/// The answer to a download request from a byte offset ([`HfClient::open_from`]).
pub enum Opened {
    /// The body, which starts at byte `start`: the offset asked for after a 206, 0 after a
    /// 200 (the server ignored the Range).
    Body {
        /// The body's bytes.
        reader: Box<dyn Read + Send>,
        /// The file offset of the body's first byte.
        start: u64,
    },
    /// 416: the server has no byte at the offset asked for. `size` is its copy's length in
    /// bytes when it said (`Content-Range: bytes */<size>`).
    NotSatisfiable {
        /// The length of the server's copy, if given.
        size: Option<u64>,
    },
}

/// An HTTP client for one Hub endpoint.
pub struct HfClient {
    cfg: HfConfig,
    agent: ureq::Agent,
}

/// `scheme://host[:port]` of a URL (for the same-host rule on redirects and tokens).
fn origin(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    let end = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |i| after_scheme + i);
    &url[..end]
}

/// Percent-encodes a revision for a URL path segment (`refs/pr/1` → `refs%2Fpr%2F1`).
fn quote(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn header(resp: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

impl HfClient {
    /// A client for `cfg.endpoint` with `cfg.token`. Every read waits at most
    /// `cfg.download_timeout` for bytes; there is no limit on a whole transfer's length.
    pub fn new(cfg: HfConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_resolve(Some(CONNECT_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(cfg.download_timeout))
            .timeout_per_read(Some(cfg.download_timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .new_agent();
        HfClient { cfg, agent }
    }

    /// The configuration this client uses.
    pub fn config(&self) -> &HfConfig {
        &self.cfg
    }

    fn request(
        &self,
        method: &str,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<ureq::http::Response<ureq::Body>, HubError> {
        let mut req = match method {
            "HEAD" => self.agent.head(url),
            _ => self.agent.get(url),
        }
        .header("Accept-Encoding", "identity")
        .header("User-Agent", concat!("oxinfer/", env!("CARGO_PKG_VERSION")));
        if let Some(token) = &self.cfg.token {
            if origin(url) == origin(&self.cfg.endpoint) {
                req = req.header("Authorization", format!("Bearer {token}"));
            }
        }
        if let Some(from) = range_from.filter(|&n| n > 0) {
            req = req.header("Range", format!("bytes={from}-"));
        }
        req.call().map_err(|e| HubError::Http {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }

    /// Maps an error status to the error the user should see; `what` names what was asked for.
    /// `code` is the Hub's `X-Error-Code` (`GatedRepo`, `RepoNotFound`, `EntryNotFound`, …):
    /// the Hub answers 401 for a repository that does not exist too, so only `GatedRepo` and
    /// 403 mean access is restricted.
    fn status_error(
        &self,
        resp: &ureq::http::Response<ureq::Body>,
        repo: &str,
        url: &str,
        what: &str,
    ) -> HubError {
        let status = resp.status().as_u16();
        let code = header(resp, "X-Error-Code").unwrap_or_default();
        let restricted = code == "GatedRepo" || status == 403 || (status == 401 && code.is_empty());
        match status {
            401 | 403 if restricted => HubError::Gated {
                repo: repo.to_string(),
                url: url.to_string(),
                endpoint: self.cfg.endpoint.clone(),
                status,
            },
            401 | 404 => HubError::NotOnHub {
                what: what.to_string(),
                url: url.to_string(),
            },
            _ => HubError::Http {
                url: url.to_string(),
                reason: format!("HTTP {status}"),
            },
        }
    }

    /// Step 1: the commit and file list of `repo` at `revision`.
    pub fn repo_info(&self, repo: &str, revision: &str) -> Result<RepoInfo, HubError> {
        let url = format!(
            "{}/api/models/{repo}/revision/{}?blobs=true",
            self.cfg.endpoint,
            quote(revision)
        );
        let resp = self.request("GET", &url, None)?;
        let status = resp.status().as_u16();
        if status != 200 {
            let what = format!("repository {repo} at revision {revision}");
            return Err(self.status_error(&resp, repo, &url, &what));
        }
        let bad = |reason: String| HubError::Http {
            url: url.clone(),
            reason,
        };
        let text = resp
            .into_body()
            .read_to_string()
            .map_err(|e| bad(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let commit = json["sha"]
            .as_str()
            .ok_or_else(|| bad("the answer has no 'sha' (commit)".into()))?
            .to_string();
        let files = json["siblings"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(|f| f["rfilename"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        Ok(RepoInfo { commit, files })
    }

    /// Step 2: the metadata of `file` in `repo` at `revision`.
    pub fn file_meta(&self, repo: &str, revision: &str, file: &str) -> Result<FileMeta, HubError> {
        let mut url = format!(
            "{}/{repo}/resolve/{}/{file}",
            self.cfg.endpoint,
            quote(revision)
        );
        for _ in 0..=MAX_HUB_REDIRECTS {
            let resp = self.request("HEAD", &url, None)?;
            let status = resp.status().as_u16();
            let location = header(&resp, "Location").map(|l| join_url(&url, &l));
            let is_redirect = (300..400).contains(&status);
            if is_redirect {
                let Some(next) = location.clone() else {
                    return Err(HubError::Http {
                        url,
                        reason: format!("HTTP {status} without a Location"),
                    });
                };
                if origin(&next) == origin(&url) {
                    url = next;
                    continue;
                }
            } else if status != 200 {
                let what = format!("file {file} of {repo} at revision {revision}");
                return Err(self.status_error(&resp, repo, &url, &what));
            }
            let missing = |h: &str| HubError::Http {
                url: url.clone(),
                reason: format!("the Hub's answer lacks the {h} header"),
            };
            let commit = header(&resp, "X-Repo-Commit").ok_or_else(|| missing("X-Repo-Commit"))?;
            let etag = header(&resp, "X-Linked-Etag")
                .or_else(|| header(&resp, "ETag"))
                .map(|e| e.trim_start_matches("W/").trim_matches('"').to_string())
                .ok_or_else(|| missing("ETag"))?;
            let size = header(&resp, "X-Linked-Size")
                .or_else(|| {
                    (!is_redirect)
                        .then(|| header(&resp, "Content-Length"))
                        .flatten()
                })
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| missing("X-Linked-Size / Content-Length"))?;
            if etag.is_empty() || etag.contains(['/', '\\', '.']) {
                return Err(HubError::Http {
                    url,
                    reason: format!("unusable ETag {etag:?}"),
                });
            }
            return Ok(FileMeta {
                commit,
                etag,
                size,
                location: location.unwrap_or(url),
            });
        }
        Err(HubError::Http {
            url,
            reason: format!("more than {MAX_HUB_REDIRECTS} redirects"),
        })
    }

    /// Step 3: `url` from byte `from` on (a Range request when `from` > 0), following
    /// redirects: the body and the offset it starts at, or the 416 answer.
    pub fn open_from(&self, repo: &str, url: &str, from: u64) -> Result<Opened, HubError> {
        let mut url = url.to_string();
        for _ in 0..=MAX_HUB_REDIRECTS {
            let resp = self.request("GET", &url, Some(from))?;
            let status = resp.status().as_u16();
            match status {
                200 | 206 => {
                    let start = if status == 206 { from } else { 0 };
                    let reader = Box::new(resp.into_body().into_reader());
                    return Ok(Opened::Body { reader, start });
                }
                416 => {
                    let size = header(&resp, "Content-Range").and_then(|r| unsatisfied_size(&r));
                    return Ok(Opened::NotSatisfiable { size });
                }
                300..=399 => match header(&resp, "Location") {
                    Some(l) => url = join_url(&url, &l),
                    None => break,
                },
                _ => return Err(self.status_error(&resp, repo, &url, &url.to_string())),
            }
        }
        Err(HubError::Http {
            url,
            reason: "too many redirects".into(),
        })
    }
}

/// The `<size>` of a 416's `Content-Range: bytes */<size>`.
fn unsatisfied_size(content_range: &str) -> Option<u64> {
    content_range
        .trim()
        .strip_prefix("bytes */")?
        .trim()
        .parse()
        .ok()
}

/// `location` (absolute, or relative to `base`) as an absolute URL.
fn join_url(base: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_string()
    } else if location.starts_with('/') {
        format!("{}{location}", origin(base))
    } else {
        let dir = base.rsplit_once('/').map_or(base, |(d, _)| d);
        format!("{dir}/{location}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_origins() {
        assert_eq!(origin("http://127.0.0.1:80/a/b"), "http://127.0.0.1:80");
        assert_eq!(origin("https://hf.co"), "https://hf.co");
        assert_eq!(join_url("http://h/a/b", "/c"), "http://h/c");
        assert_eq!(join_url("http://h/a/b", "c"), "http://h/a/c");
        assert_eq!(join_url("http://h/a", "http://cdn/x"), "http://cdn/x");
        assert_eq!(quote("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(quote("main"), "main");
        assert_eq!(unsatisfied_size("bytes */1234"), Some(1234));
        assert_eq!(unsatisfied_size("bytes 0-9/10"), None);
    }
}
