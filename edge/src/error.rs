//! The one error type of the edge, mapped once to an HTTP answer or a queue decision.

use std::fmt;

use exactly_core::Rejection;
use worker::Response;

/// Everything that can go wrong while handling a request or a job.
#[derive(Debug)]
pub enum EdgeError {
    /// A carrier delivery that must not be stored (401, 400 or 413).
    Rejected(Rejection),
    /// No route for this method and path.
    NotFound,
    /// The route exists but not for this method.
    MethodNotAllowed,
    /// A required variable or secret is missing or malformed. Names the variable, never its value.
    Config { variable: &'static str, problem: String },
    /// D1, the queue or the platform failed; nothing was half-done and a retry is safe.
    Unavailable(String),
}

impl EdgeError {
    /// An error from a D1 call, a queue send or another platform binding.
    pub fn platform(context: &str, error: impl fmt::Display) -> Self {
        EdgeError::Unavailable(format!("{context}: {error}"))
    }

    fn status_code_message(&self) -> (u16, &'static str, String) {
        match self {
            EdgeError::Rejected(r) => {
                let status = match r {
                    Rejection::Unauthenticated(_) => 401,
                    Rejection::TooLarge { .. } => 413,
                    _ => 400,
                };
                (status, r.code(), r.to_string())
            }
            EdgeError::NotFound => (404, "not_found", "no such route".into()),
            EdgeError::MethodNotAllowed => {
                (405, "method_not_allowed", "method not allowed on this route".into())
            }
            EdgeError::Config { variable, problem } => (
                503,
                "misconfigured",
                format!("configuration variable {variable} {problem}"),
            ),
            // Internal detail goes to the log, not to the caller.
            EdgeError::Unavailable(_) => {
                (503, "unavailable", "temporarily unavailable, retry later".into())
            }
        }
    }

    /// The JSON error answer: `{"error": {"code": "...", "message": "..."}}`.
    pub fn to_response(&self) -> worker::Result<Response> {
        let (status, code, message) = self.status_code_message();
        let body = serde_json::json!({ "error": { "code": code, "message": message } });
        Ok(Response::from_json(&body)?.with_status(status))
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> u16 {
        self.status_code_message().0
    }
}

impl fmt::Display for EdgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EdgeError::Unavailable(detail) => write!(f, "unavailable: {detail}"),
            other => f.write_str(&other.status_code_message().2),
        }
    }
}

impl From<Rejection> for EdgeError {
    fn from(r: Rejection) -> Self {
        EdgeError::Rejected(r)
    }
}
