//! Which browser pages may reach the API: the `Host` check (against DNS rebinding) and the
//! `Origin` check with CORS for the origins the user listed (`--cors-origin`).
//!
//! - `Host`: a page on `evil.example` whose name is re-pointed at 127.0.0.1 reaches a loopback
//!   server as a same-origin page, but its requests still carry `Host: evil.example`. A server
//!   bound to loopback therefore answers only to `localhost` (and `*.localhost`), to IP
//!   literals (a rebinding needs a name), and to the names given with `--allowed-host`. Bound
//!   to any other address the user has opened the server to the network, where clients may use
//!   any name (LAN names, proxies): every `Host` is accepted unless `--allowed-host` is given,
//!   which then restricts it the same way.
//! - `Origin`: browsers label cross-site requests (and same-origin POSTs) with `Origin`. A
//!   request carrying an `Origin` not listed with `--cors-origin` is refused, whatever its
//!   method, so a page on another site can neither read nor drive the API. Listed origins get
//!   CORS headers and answered preflights (`OPTIONS` with `Access-Control-Request-Method`).
//!   Clients that are not browsers send no `Origin` and are not affected.

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// Longest part of a refused header value quoted back in the error.
const QUOTE_MAX: usize = 100;

/// Methods and request headers a preflight allows.
const ALLOW_METHODS: &str = "GET, POST, OPTIONS";
const ALLOW_HEADERS: &str = "authorization, content-type";
/// How long a browser may cache a preflight answer, in seconds.
const PREFLIGHT_MAX_AGE: &str = "600";

/// The `Host` and `Origin` policy of one server.
#[derive(Clone, Debug)]
pub struct AccessPolicy {
    /// The address the server listens on (named in errors).
    bind: IpAddr,
    /// Host names accepted besides IP literals and `localhost`; `None`: every name.
    hosts: Option<Vec<String>>,
    /// Origins allowed (lowercase, without a trailing `/`); `*` allows every origin.
    origins: Vec<String>,
}

impl AccessPolicy {
    /// The policy of a server bound to `bind`, with the `--allowed-host` names and the
    /// `--cors-origin` origins.
    pub fn new(bind: IpAddr, allowed_hosts: &[String], cors_origins: &[String]) -> Self {
        let hosts: Vec<String> = allowed_hosts.iter().map(|h| normalize_host(h)).collect();
        let hosts = if hosts.is_empty() && !bind.is_loopback() {
            None
        } else {
            Some(hosts)
        };
        AccessPolicy {
            bind,
            hosts,
            origins: cors_origins.iter().map(|o| normalize_origin(o)).collect(),
        }
    }

    /// Whether a `Host` header value (name or IP literal, with or without a port) is accepted.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = normalize_host(host);
        let Some(names) = &self.hosts else {
            return true;
        };
        name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || names.contains(&name)
    }

    /// Whether requests from a page of `origin` (an `Origin` header value) are allowed.
    pub fn origin_allowed(&self, origin: &str) -> bool {
        let origin = normalize_origin(origin);
        self.origins.iter().any(|o| o == "*" || *o == origin)
    }

    /// The 403 for a `Host` not accepted.
    fn host_error(&self, host: &str) -> ApiError {
        let how = if self.bind.is_loopback() {
            format!(
                "this server listens on {} and answers to localhost, IP addresses and the \
                 names given with --allowed-host",
                self.bind
            )
        } else {
            "this server answers to IP addresses, localhost and the names given with \
             --allowed-host"
                .to_string()
        };
        ApiError::forbidden(
            "Host",
            format!(
                "Host '{}' is not accepted: {how} (a page whose name was re-pointed at this \
                 machine must not reach it; start the server with --allowed-host NAME to \
                 accept a name)",
                quote(host)
            ),
        )
    }

    /// The 403 for an `Origin` not listed.
    fn origin_error(origin: &str) -> ApiError {
        ApiError::forbidden(
            "Origin",
            format!(
                "requests from the web page origin '{}' are not allowed (a page on another \
                 site must not drive this server); start it with --cors-origin ORIGIN to \
                 allow one",
                quote(origin)
            ),
        )
    }
}

/// `host[:port]` or `[v6]:port` as a lowercase name or IP literal without port, brackets or
/// trailing dot.
fn normalize_host(value: &str) -> String {
    let v = value.trim().to_ascii_lowercase();
    let name = if let Some(rest) = v.strip_prefix('[') {
        rest.split(']').next().unwrap_or("").to_string()
    } else if v.matches(':').count() == 1 {
        v.split(':').next().unwrap_or("").to_string()
    } else {
        v
    };
    name.trim_end_matches('.').to_string()
}

/// An origin as compared: lowercase, no trailing `/`.
fn normalize_origin(value: &str) -> String {
    value.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// A header value cut to [`QUOTE_MAX`] characters for an error message.
fn quote(v: &str) -> String {
    if v.chars().count() <= QUOTE_MAX {
        v.to_string()
    } else {
        let cut: String = v.chars().take(QUOTE_MAX).collect();
        format!("{cut}…")
    }
}

/// The `Host` of a request: the header, else the URI's authority (absolute-form requests).
fn request_host(req: &Request) -> Option<String> {
    req.headers()
        .get(header::HOST)
        .map(|v| v.to_str().unwrap_or("(not text)").to_string())
        .or_else(|| req.uri().authority().map(|a| a.to_string()))
}

/// The CORS headers of an answer to a listed origin.
fn cors_headers(headers: &mut HeaderMap, origin: &HeaderValue) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static("retry-after"),
    );
}

/// The middleware: refuses (403) a request whose `Host` or `Origin` is not accepted, answers
/// preflights of listed origins, and adds CORS headers to their other answers.
pub async fn check(State(policy): State<Arc<AccessPolicy>>, req: Request, next: Next) -> Response {
    if let Some(host) = request_host(&req) {
        if !policy.host_allowed(&host) {
            return policy.host_error(&host).into_response();
        }
    }
    let Some(origin) = req.headers().get(header::ORIGIN).cloned() else {
        return next.run(req).await;
    };
    let text = origin.to_str().unwrap_or("(not text)");
    if !policy.origin_allowed(text) {
        return AccessPolicy::origin_error(text).into_response();
    }
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut resp = if preflight {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static(ALLOW_METHODS),
        );
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static(ALLOW_HEADERS),
        );
        h.insert(
            header::ACCESS_CONTROL_MAX_AGE,
            HeaderValue::from_static(PREFLIGHT_MAX_AGE),
        );
        r
    } else {
        next.run(req).await
    };
    cors_headers(resp.headers_mut(), &origin);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bind: &str, hosts: &[&str], origins: &[&str]) -> AccessPolicy {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        AccessPolicy::new(bind.parse().unwrap(), &s(hosts), &s(origins))
    }

    #[test]
    fn loopback_answers_to_localhost_ip_literals_and_listed_names() {
        let p = policy("127.0.0.1", &["my-box.lan"], &[]);
        for ok in [
            "localhost",
            "LOCALHOST:8080",
            "app.localhost:1",
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.1.2.3",
            "my-box.lan:8080",
            "my-box.lan.",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "",
        ] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn network_bind_answers_to_any_host_unless_names_are_listed() {
        assert!(policy("0.0.0.0", &[], &[]).host_allowed("anything.example"));
        let p = policy("0.0.0.0", &["api.example"], &[]);
        assert!(p.host_allowed("api.example:443"));
        assert!(p.host_allowed("192.168.1.9"));
        assert!(!p.host_allowed("evil.example"));
    }

    #[test]
    fn only_listed_origins_are_allowed() {
        let p = policy("127.0.0.1", &[], &["http://localhost:3000/"]);
        assert!(p.origin_allowed("http://LOCALHOST:3000"));
        assert!(!p.origin_allowed("http://localhost:3001"));
        assert!(!p.origin_allowed("null"));
        assert!(!policy("127.0.0.1", &[], &[]).origin_allowed("http://localhost:3000"));
        assert!(policy("127.0.0.1", &[], &["*"]).origin_allowed("https://any.example"));
    }
}
