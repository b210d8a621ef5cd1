//! The HTTP front end's connection handling: binding, the connection limit, header and body
//! read timeouts, and graceful shutdown. HTTP itself is hyper's (HTTP/1.1 with keep-alive).

use crate::error::ApiError;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// How long connections may take and how many are served at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Longest time to receive a request's headers, counted from when the connection is ready
    /// for a request: it cuts off slow senders (slowloris) and also closes a keep-alive
    /// connection left idle this long.
    pub header_timeout: Duration,
    /// Longest time to receive a request's body once its headers are in (then 408).
    pub body_timeout: Duration,
    /// Connections served at once; further ones wait in the listen backlog until one closes.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 256,
        }
    }
}

/// How long shutdown waits for open connections (streams in progress) before it stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Binds `addr`; the error names the address (and says when it is in use). Bind before
/// loading a model, so a busy port is reported at once.
pub fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            "the address is in use (another server on that port? choose one with --port)"
                .to_string()
        } else {
            e.to_string()
        };
        std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {why}"))
    })?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serves `app` on `listener` within `limits` until `shutdown` completes; then stops
/// accepting and waits up to [`SHUTDOWN_GRACE`] for open connections.
pub async fn serve_connections(
    listener: std::net::TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    tokio::pin!(shutdown);
    loop {
        // Take a connection slot first: over the limit, new connections wait unaccepted.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors and the like: wait a little, keep serving.
                    eprintln!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // Errors here are the client's (reset, header timeout): nothing to answer.
            let _ = conn.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    Ok(())
}

/// Settings of [`read_body`].
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Largest body in bytes (more: 413).
    pub max_bytes: usize,
    /// Longest time to receive it (more: 408).
    pub timeout: Duration,
}

/// The middleware that reads a POST body in full within the body timeout and size limit
/// before the handler runs (408 when it is too slow, 413 when too large).
pub async fn read_body(State(limits): State<BodyLimits>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(limits.timeout, collect(body, limits.max_bytes)).await {
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(Err(e)) => e.into_response(),
        Err(_) => ApiError::body_timeout(limits.timeout).into_response(),
    }
}

/// The whole body, at most `max` bytes.
async fn collect(body: Body, max: usize) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?;
        if buf.len() + chunk.len() > max {
            return Err(ApiError::with_status(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {max} bytes (--max-body)"),
            ));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}
