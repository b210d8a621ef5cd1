//! A fake Hugging Face Hub on loopback for the hub tests: the endpoints, headers, redirects and
//! errors `huggingface_hub` 2.4 and oxinfer use (see crates/oxinfer/src/hub/hf/client.rs):
//!
//! - `GET /api/models/{org}/{name}/revision/{rev}` → `{"id", "sha", "siblings": [{"rfilename",
//!   "size", "lfs"?}]}`;
//! - `HEAD|GET /{org}/{name}/resolve/{rev}/{path}`: an LFS file answers 302 to the "CDN" (a
//!   second listener, so another origin, as cdn-lfs.huggingface.co is) with `X-Repo-Commit`,
//!   `X-Linked-Etag` (the SHA-256) and `X-Linked-Size`; a small file answers 200 with `ETag` and
//!   `X-Repo-Commit`; gated repositories answer 401 (`X-Error-Code: GatedRepo`) without the
//!   right token, unknown ones 404 (`RepoNotFound` / `EntryNotFound` / `RevisionNotFound`);
//! - the CDN: `GET /blobs/{sha256}` with `Range: bytes=N-` (206, or 416 with
//!   `Content-Range: bytes */size` at or past the end). A blob can be set to be cut after half
//!   its bytes once, to drop every connection at one byte offset, to stall (hold the connection
//!   silent) after half its bytes once, to trickle out in small timed chunks, to answer 416 to
//!   its next Range request, or served corrupted; the Hub can announce a size for it that the
//!   CDN's copy does not have (stale metadata).

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};

/// One file of a fake repository.
#[derive(Clone)]
pub struct FakeFile {
    pub path: String,
    pub bytes: Vec<u8>,
    /// Served through the CDN with an LFS SHA-256 ETag (large files on the real Hub).
    pub lfs: bool,
}

impl FakeFile {
    pub fn new(path: &str, bytes: Vec<u8>, lfs: bool) -> Self {
        FakeFile {
            path: path.to_string(),
            bytes,
            lfs,
        }
    }

    pub fn sha256(&self) -> String {
        hex(&Sha256::digest(&self.bytes))
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A fake repository at one commit.
#[derive(Clone)]
pub struct FakeRepo {
    pub id: String,
    pub commit: String,
    pub files: Vec<FakeFile>,
    /// Needs `Authorization: Bearer <token>`.
    pub gated: bool,
}

#[derive(Default)]
struct State {
    repos: HashMap<String, FakeRepo>,
    token: String,
    /// Blob SHA-256s whose next CDN GET is cut after half the bytes.
    cut_once: HashSet<String>,
    /// Blob SHA-256s served with one byte flipped.
    corrupt: HashSet<String>,
    /// Blob SHA-256 → file offset at which every CDN GET of it closes the connection.
    drop_at: HashMap<String, usize>,
    /// Blob SHA-256 → silence after half the bytes of its next CDN GET, before the close.
    stall_once: HashMap<String, Duration>,
    /// Blob SHA-256 → (chunk bytes, pause after each chunk) for every CDN GET of it.
    pace: HashMap<String, (usize, Duration)>,
    /// Blob SHA-256s whose next CDN GET with a Range answers 416.
    refuse_range_once: HashSet<String>,
    /// Blob SHA-256 → the size the Hub announces for it (API listing and `X-Linked-Size`).
    announced_size: HashMap<String, usize>,
    /// "METHOD path [range]" of every request, in order.
    log: Vec<String>,
}

/// The running fake Hub.
pub struct FakeHub {
    /// `http://127.0.0.1:<port>`, to use as `HF_ENDPOINT`.
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

impl FakeHub {
    /// Starts the Hub and its CDN on loopback; `token` opens gated repositories.
    pub fn start(token: &str) -> Self {
        let state = Arc::new(Mutex::new(State {
            token: token.to_string(),
            ..State::default()
        }));
        let hub = TcpListener::bind("127.0.0.1:0").expect("bind hub");
        let cdn = TcpListener::bind("127.0.0.1:0").expect("bind cdn");
        let endpoint = format!("http://{}", hub.local_addr().unwrap());
        let cdn_url = format!("http://{}", cdn.local_addr().unwrap());
        for (listener, is_cdn) in [(hub, false), (cdn, true)] {
            let state = state.clone();
            let cdn_url = cdn_url.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming().flatten() {
                    let state = state.clone();
                    let cdn_url = cdn_url.clone();
                    std::thread::spawn(move || serve(stream, &state, is_cdn, &cdn_url));
                }
            });
        }
        FakeHub { endpoint, state }
    }

    pub fn add_repo(&self, repo: FakeRepo) {
        let mut s = self.state.lock().unwrap();
        s.repos.insert(repo.id.clone(), repo);
    }

    pub fn cut_once(&self, sha256: &str) {
        self.state.lock().unwrap().cut_once.insert(sha256.into());
    }

    pub fn corrupt(&self, sha256: &str) {
        self.state.lock().unwrap().corrupt.insert(sha256.into());
    }

    /// Every CDN GET of the blob closes the connection at file offset `at` (`None`: never).
    pub fn drop_at(&self, sha256: &str, at: Option<usize>) {
        let mut s = self.state.lock().unwrap();
        match at {
            Some(n) => s.drop_at.insert(sha256.into(), n),
            None => s.drop_at.remove(sha256),
        };
    }

    /// The next CDN GET of the blob sends half its bytes, then nothing for `silence`, then
    /// closes.
    pub fn stall_once(&self, sha256: &str, silence: Duration) {
        let mut s = self.state.lock().unwrap();
        s.stall_once.insert(sha256.into(), silence);
    }

    /// Every CDN GET of the blob sends `chunk` bytes, then pauses for `pause`, until done.
    pub fn pace(&self, sha256: &str, chunk: usize, pause: Duration) {
        let mut s = self.state.lock().unwrap();
        s.pace.insert(sha256.into(), (chunk.max(1), pause));
    }

    /// The next CDN GET of the blob with a Range answers 416 (`bytes */size`).
    pub fn refuse_range_once(&self, sha256: &str) {
        let mut s = self.state.lock().unwrap();
        s.refuse_range_once.insert(sha256.into());
    }

    /// The Hub announces `size` bytes for the blob (the CDN still serves its real bytes).
    pub fn announce_size(&self, sha256: &str, size: usize) {
        let mut s = self.state.lock().unwrap();
        s.announced_size.insert(sha256.into(), size);
    }

    /// The requests served so far.
    pub fn log(&self) -> Vec<String> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn clear_log(&self) {
        self.state.lock().unwrap().log.clear();
    }
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    Some(Request {
        method,
        path,
        headers,
    })
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Send only this many body bytes, then close (a cut transfer).
    cut_at: Option<usize>,
    /// Send the body in chunks of this many bytes with this pause after each.
    pace: Option<(usize, Duration)>,
    /// After the bytes sent, keep the connection open and silent this long before closing.
    stall: Option<Duration>,
}

impl Response {
    fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            cut_at: None,
            pace: None,
            stall: None,
        }
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Self {
        self.headers.push((k.to_string(), v.into()));
        self
    }

    fn error(status: u16, code: &str, message: &str) -> Self {
        let mut r = Response::new(status)
            .header("X-Error-Code", code)
            .header("X-Error-Message", message)
            .header("Content-Type", "application/json");
        r.body = format!("{{\"error\":\"{message}\"}}").into_bytes();
        r
    }
}

fn serve(mut stream: TcpStream, state: &Mutex<State>, is_cdn: bool, cdn_url: &str) {
    let Some(req) = read_request(&stream) else {
        return;
    };
    let range = req.headers.get("range").cloned();
    {
        let mut s = state.lock().unwrap();
        let entry = format!(
            "{}{} {}{}",
            if is_cdn { "CDN " } else { "" },
            req.method,
            req.path,
            range.as_ref().map(|r| format!(" {r}")).unwrap_or_default()
        );
        s.log.push(entry);
    }
    let resp = if is_cdn {
        cdn(&req, state)
    } else {
        hub(&req, state, cdn_url)
    };
    let reason = match resp.status {
        200 => "OK",
        206 => "Partial Content",
        302 => "Found",
        401 => "Unauthorized",
        404 => "Not Found",
        416 => "Range Not Satisfiable",
        _ => "Status",
    };
    let mut head = format!("HTTP/1.1 {} {reason}\r\n", resp.status);
    let has_length = resp
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !has_length {
        head.push_str(&format!("Content-Length: {}\r\n", resp.body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes());
    if req.method != "HEAD" {
        let n = resp.cut_at.unwrap_or(resp.body.len());
        let body = &resp.body[..n];
        match resp.pace {
            Some((chunk, pause)) => {
                for c in body.chunks(chunk) {
                    if stream.write_all(c).and_then(|_| stream.flush()).is_err() {
                        break;
                    }
                    std::thread::sleep(pause);
                }
            }
            None => {
                let _ = stream.write_all(body);
            }
        }
        if let Some(silence) = resp.stall {
            let _ = stream.flush();
            std::thread::sleep(silence);
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn authorized(req: &Request, s: &State) -> bool {
    req.headers.get("authorization") == Some(&format!("Bearer {}", s.token))
}

fn hub(req: &Request, state: &Mutex<State>, cdn_url: &str) -> Response {
    let s = state.lock().unwrap();
    let path = req.path.split('?').next().unwrap_or_default();
    let path = path.replace("%2F", "/");
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (repo_id, rest, api) = match segments.as_slice() {
        ["api", "models", org, name, "revision", rev @ ..] => {
            (format!("{org}/{name}"), rev.join("/"), true)
        }
        [org, name, "resolve", rest @ ..] => (format!("{org}/{name}"), rest.join("/"), false),
        _ => return Response::error(404, "NotFound", "no such endpoint"),
    };
    let Some(repo) = s.repos.get(&repo_id) else {
        return Response::error(401, "RepoNotFound", "Repository not found");
    };
    if repo.gated && !authorized(req, &s) {
        return Response::error(
            401,
            "GatedRepo",
            "Access to this model is restricted. You must have access to it and be authenticated.",
        );
    }
    let revision_ok = |rev: &str| rev == "main" || rev == repo.commit;
    if api {
        if !revision_ok(&rest) {
            return Response::error(404, "RevisionNotFound", "Invalid rev id");
        }
        let siblings: Vec<String> = repo
            .files
            .iter()
            .map(|f| {
                let size = announced(&s, f);
                let lfs = if f.lfs {
                    format!(
                        ",\"lfs\":{{\"sha256\":\"{}\",\"size\":{size},\"pointerSize\":133}}",
                        f.sha256(),
                    )
                } else {
                    String::new()
                };
                format!("{{\"rfilename\":\"{}\",\"size\":{size}{lfs}}}", f.path)
            })
            .collect();
        let mut r = Response::new(200).header("Content-Type", "application/json");
        r.body = format!(
            "{{\"id\":\"{repo_id}\",\"sha\":\"{}\",\"siblings\":[{}]}}",
            repo.commit,
            siblings.join(",")
        )
        .into_bytes();
        return r;
    }
    let Some((rev, file)) = rest.split_once('/') else {
        return Response::error(404, "EntryNotFound", "no file");
    };
    if !revision_ok(rev) {
        return Response::error(404, "RevisionNotFound", "Invalid rev id");
    }
    let Some(f) = repo.files.iter().find(|f| f.path == file) else {
        return Response::error(404, "EntryNotFound", "Entry not found")
            .header("X-Repo-Commit", repo.commit.clone());
    };
    if f.lfs {
        let sha = f.sha256();
        return Response::new(302)
            .header("Location", format!("{cdn_url}/blobs/{sha}"))
            .header("X-Repo-Commit", repo.commit.clone())
            .header("X-Linked-Etag", format!("\"{sha}\""))
            .header("X-Linked-Size", announced(&s, f).to_string())
            .header("ETag", "\"0123456789abcdef0123456789abcdef01234567\"");
    }
    // A small (non-LFS) file: its git blob id as ETag, served from the Hub itself.
    let mut r = Response::new(200)
        .header("X-Repo-Commit", repo.commit.clone())
        .header("ETag", format!("\"{}\"", &f.sha256()[..40]));
    r.body = f.bytes.clone();
    r
}

/// The size the Hub announces for `f`.
fn announced(s: &State, f: &FakeFile) -> usize {
    s.announced_size
        .get(&f.sha256())
        .copied()
        .unwrap_or(f.bytes.len())
}

fn cdn(req: &Request, state: &Mutex<State>) -> Response {
    let mut s = state.lock().unwrap();
    let Some(sha) = req.path.strip_prefix("/blobs/") else {
        return Response::error(404, "NotFound", "no such blob");
    };
    let sha = sha.to_string();
    let Some(f) = s
        .repos
        .values()
        .flat_map(|r| r.files.iter())
        .find(|f| f.lfs && f.sha256() == sha)
        .cloned()
    else {
        return Response::error(404, "NotFound", "no such blob");
    };
    let mut body = f.bytes.clone();
    if s.corrupt.contains(&sha) {
        let mid = body.len() / 2;
        body[mid] ^= 0x55;
    }
    let total = body.len();
    let from = req
        .headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let refuse = from.is_some() && s.refuse_range_once.remove(&sha);
    let mut resp = match from {
        Some(n) if n >= total || refuse => {
            return Response::new(416).header("Content-Range", format!("bytes */{total}"))
        }
        Some(n) => {
            let mut r = Response::new(206)
                .header("Content-Range", format!("bytes {n}-{}/{total}", total - 1));
            r.body = body[n..].to_vec();
            r
        }
        None => {
            let mut r = Response::new(200);
            r.body = body;
            r
        }
    };
    if req.method == "GET" && s.cut_once.remove(&sha) {
        resp.cut_at = Some(resp.body.len() / 2);
    }
    if let Some(&at) = s.drop_at.get(&sha) {
        let start = from.unwrap_or(0);
        resp.cut_at = Some(at.saturating_sub(start).min(resp.body.len()));
    }
    if req.method == "GET" {
        if let Some(silence) = s.stall_once.remove(&sha) {
            resp.cut_at = Some(resp.body.len() / 2);
            resp.stall = Some(silence);
        }
    }
    resp.pace = s.pace.get(&sha).copied();
    resp.header("Content-Type", "application/octet-stream")
}

/// Reads a whole stream (used by tests that talk to the server directly).
pub fn read_all(mut r: impl Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}
