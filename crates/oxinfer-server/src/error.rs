//! Errors as the OpenAI API reports them: a status code and
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// A short machine-readable code (`model_not_found`, `context_length_exceeded`, ...).
    pub code: Option<&'static str>,
    /// For 503: when to retry.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400: the request is malformed or a value is out of range.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 401: missing or wrong API key.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid or missing API key: send 'Authorization: Bearer <key>'",
        )
        .with_code("invalid_api_key")
    }

    /// 415: a request body that does not say it is JSON.
    pub fn unsupported_media_type(given: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!(
                "Content-Type '{given}' is not accepted: send the body as 'Content-Type: application/json'"
            ),
        )
        .with_param("Content-Type")
    }

    /// 403: a request a browser page may have sent: its `Host` (DNS rebinding) or `Origin`
    /// (another site) is not one this server answers to. `header` names the header at fault.
    pub fn forbidden(header: &'static str, message: impl Into<String>) -> Self {
        let code = match header {
            "Host" => "host_not_allowed",
            _ => "origin_not_allowed",
        };
        Self::new(StatusCode::FORBIDDEN, "permission_error", message)
            .with_param(header)
            .with_code(code)
    }

    /// 408: the request body did not arrive within the body timeout.
    pub fn body_timeout(limit: Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {} s (--body-timeout)",
                limit.as_secs_f64()
            ),
        )
        .with_code("request_timeout")
    }

    /// 404: unknown model or route.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    /// 503: every slot busy and the queue full.
    pub fn busy(waiting: usize, retry_after: Duration) -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_busy",
            format!("server busy: {waiting} requests already wait for a slot; retry later"),
        );
        e.retry_after = Some(retry_after);
        e.with_code("queue_full")
    }

    /// 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// Any status, with the type OpenAI uses for it.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        let kind = if status == StatusCode::PAYLOAD_TOO_LARGE || status.is_client_error() {
            "invalid_request_error"
        } else {
            "server_error"
        };
        Self::new(status, kind, message)
    }

    /// Names the request field at fault.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Sets the machine-readable code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(d) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&d.as_secs().max(1).to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        resp
    }
}
