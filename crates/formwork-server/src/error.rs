//! The one error type of the server: an HTTP status plus the body the SDKs turn into their
//! exception classes (`BadRequestError` for 400, `AuthenticationError` for 401,
//! `NotFoundError` for 404, …), in the [`Dialect`] of the endpoint: OpenAI's
//! `{"error": {"message", "type", "param", "code"}}` or Anthropic's
//! `{"type": "error", "error": {"type", "message"}}` (which has no `param`: the message starts
//! with the field at fault, `max_tokens: …`, as Anthropic's own messages do).
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
    /// Seconds after which a retry may succeed: the `Retry-After` header of a 503 (non-zero,
    /// so that the field packs beside `status` and the error stays small).
    pub retry_after: Option<std::num::NonZeroU32>,
}

impl ApiError {
    /// An error with `status` and `message`, no param or code.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
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

    /// Renames the field at fault, for an endpoint whose request names it differently.
    pub fn rename_param(mut self, from: &str, to: &str) -> Self {
        if self.param.as_deref() == Some(from) {
            self.param = Some(to.to_string());
        }
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

    /// The `error.type` Anthropic gives this status.
    fn anthropic_kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ if self.status.is_client_error() => "invalid_request_error",
            _ => "api_error",
        }
    }

    /// The JSON body in Anthropic's shape.
    pub fn anthropic_body(&self) -> Value {
        let message = match &self.param {
            Some(p) => format!("{p}: {}", self.message),
            None => self.message.clone(),
        };
        json!({"type": "error", "error": {"type": self.anthropic_kind(), "message": message}})
    }

    /// The response in `dialect`'s shape.
    pub fn into_response_for(self, dialect: Dialect) -> Response {
        let body = match dialect {
            Dialect::OpenAi => self.body(),
            Dialect::Anthropic => self.anthropic_body(),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(s) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, s.get().into());
        }
        response
    }
}

/// Which API's error shape a response takes: the one its endpoint imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI's (Chat Completions, Responses, models, health).
    OpenAi,
    /// Anthropic's (`/v1/messages`).
    Anthropic,
}

impl Dialect {
    /// The dialect of the endpoint at `path`.
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/v1/messages") {
            Dialect::Anthropic
        } else {
            Dialect::OpenAi
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.into_response_for(Dialect::OpenAi)
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

    #[test]
    fn anthropic_body_names_the_field_in_the_message() {
        let e = ApiError::invalid("max_tokens", "`max_tokens` is required");
        assert_eq!(
            e.anthropic_body(),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "max_tokens: `max_tokens` is required"}})
        );
        let busy = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "queue full");
        assert_eq!(busy.anthropic_body()["error"]["type"], "overloaded_error");
        let auth = ApiError::new(StatusCode::UNAUTHORIZED, "no key");
        assert_eq!(
            auth.anthropic_body()["error"]["type"],
            "authentication_error"
        );
        assert_eq!(Dialect::of_path("/v1/messages"), Dialect::Anthropic);
        assert_eq!(Dialect::of_path("/v1/chat/completions"), Dialect::OpenAi);
    }
}
