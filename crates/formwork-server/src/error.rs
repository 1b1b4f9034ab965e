//! The one error type of the server: an HTTP status plus the OpenAI-style body
//! `{"error": {"message", "type", "param", "code"}}` the SDKs turn into their exception classes
//! (`BadRequestError` for 400, `AuthenticationError` for 401, `NotFoundError` for 404, …).
//!
//! Owns the mapping from failures to statuses; does not own logging (the caller's log hook).
//!
//! May use: nothing else in the crate.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

/// A request that failed: the status to answer with and what the body says.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people (lower case, no trailing period).
    pub message: String,
    /// The request field at fault (`response_format`, `messages[2].role`, …), if any.
    pub param: Option<String>,
    /// A machine-readable code (`unsupported_schema`, `model_not_found`, …), if any.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// An error with `status` and `message`, no param or code.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A 400 about the request field `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message).param(param)
    }

    /// Sets the field at fault.
    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// Sets the machine-readable code.
    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The `type` OpenAI gives this status.
    fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            404 => "not_found_error",
            413 | 400 | 422 => "invalid_request_error",
            429 | 503 => "server_busy_error",
            _ if self.status.is_client_error() => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind(),
            "param": self.param,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_openai_shape() {
        let e = ApiError::invalid("response_format", "unsupported keyword `not` at /not")
            .code("unsupported_schema");
        assert_eq!(
            e.body(),
            json!({"error": {"message": "unsupported keyword `not` at /not",
                "type": "invalid_request_error", "param": "response_format",
                "code": "unsupported_schema"}})
        );
        let busy = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "queue full");
        assert_eq!(busy.body()["error"]["type"], "server_busy_error");
        assert_eq!(busy.body()["error"]["param"], Value::Null);
    }
}
