//! The one error type of the edge, mapped once to an HTTP answer.

use std::fmt;

use exactly_core::Rejection;
use worker::Response;

/// Everything that can go wrong while handling a request or a job.
#[derive(Debug)]
pub enum EdgeError {
    /// A carrier delivery that must not be stored (401, 400 or 413).
    Rejected(Rejection),
    /// Missing or wrong bearer token (401).
    Unauthorized,
    /// No route for this path (404).
    NoRoute,
    /// No such resource for this account (404).
    NotFound,
    /// The route exists but not for this method (405).
    MethodNotAllowed,
    /// The request body is not JSON of the expected shape (400).
    BadRequest(String),
    /// A field failed validation (422), named.
    Invalid { field: &'static str, message: String },
    /// The request conflicts with the state of a resource (409).
    Conflict { code: &'static str, message: String },
    /// A required variable or secret is missing or malformed. Names the variable, never its value.
    Config { variable: &'static str, problem: String },
    /// D1, a queue, a carrier or the platform failed; nothing was half-done and a retry is safe.
    Unavailable(String),
}

impl EdgeError {
    /// An error from a D1 call, a queue send or another platform binding.
    pub fn platform(context: &str, error: impl fmt::Display) -> Self {
        EdgeError::Unavailable(format!("{context}: {error}"))
    }

    /// A validation failure of `field`.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        EdgeError::Invalid { field, message: message.into() }
    }

    /// (status, code, message, field)
    fn parts(&self) -> (u16, &'static str, String, Option<&'static str>) {
        match self {
            EdgeError::Rejected(r) => {
                let status = match r {
                    Rejection::Unauthenticated(_) => 401,
                    Rejection::TooLarge { .. } => 413,
                    _ => 400,
                };
                (status, r.code(), r.to_string(), None)
            }
            EdgeError::Unauthorized => (401, "unauthorized", "missing or invalid bearer token".into(), None),
            EdgeError::NoRoute => (404, "no_route", "no such route".into(), None),
            EdgeError::NotFound => (404, "not_found", "not found".into(), None),
            EdgeError::MethodNotAllowed => (405, "method_not_allowed", "method not allowed on this route".into(), None),
            EdgeError::BadRequest(message) => (400, "bad_request", message.clone(), None),
            EdgeError::Invalid { field, message } => (422, "invalid_field", format!("{field}: {message}"), Some(field)),
            EdgeError::Conflict { code, message } => (409, code, message.clone(), None),
            EdgeError::Config { variable, problem } => {
                (503, "misconfigured", format!("configuration variable {variable} {problem}"), None)
            }
            // Internal detail goes to the log, not to the caller.
            EdgeError::Unavailable(_) => (503, "unavailable", "temporarily unavailable, retry later".into(), None),
        }
    }

    /// The JSON error answer: `{"error": {"code": "...", "message": "...", "field": "..."}}`.
    pub fn to_response(&self) -> worker::Result<Response> {
        let (status, code, message, field) = self.parts();
        let mut error = serde_json::json!({ "code": code, "message": message });
        if let Some(field) = field {
            error["field"] = serde_json::json!(field);
        }
        let mut response = Response::from_json(&serde_json::json!({ "error": error }))?.with_status(status);
        if status == 503 {
            response.headers_mut().set("retry-after", "5")?;
        }
        Ok(response)
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        self.parts().0
    }
}

impl fmt::Display for EdgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EdgeError::Unavailable(detail) => write!(f, "unavailable: {detail}"),
            other => f.write_str(&other.parts().2),
        }
    }
}

impl From<Rejection> for EdgeError {
    fn from(r: Rejection) -> Self {
        EdgeError::Rejected(r)
    }
}
