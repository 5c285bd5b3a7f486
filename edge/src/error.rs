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
    Unauthorized(Refused),
    /// No route for this path (404).
    NoRoute,
    /// No such resource for this account (404).
    NotFound,
    /// A media link whose signature is not valid or whose time is up (403).
    Forbidden(exactly_core::media::LinkError),
    /// The caller's key scope or portal session does not reach this route (403).
    NotPermitted(exactly_core::access::Refusal),
    /// The media item exists but its copy is not stored (yet, or ever: 404).
    MediaNotStored,
    /// The route exists but not for this method (405); `allow` names its methods (`GET, POST`).
    MethodNotAllowed { allow: String },
    /// The request body is not JSON of the expected shape (400).
    BadRequest(String),
    /// The request body is longer than the route takes (413).
    BodyTooLarge { max: usize },
    /// A field failed validation (422), named.
    Invalid { field: &'static str, message: String },
    /// The request conflicts with the state of a resource (409).
    Conflict { code: Conflict, message: String },
    /// The caller's API key or admin token is over its rate limit (429), until `retry_after`
    /// seconds from now at most.
    RateLimited { retry_after: u32 },
    /// A required variable or secret is missing or malformed. Names the variable, never its value.
    Config { variable: &'static str, problem: String },
    /// D1, a queue, a carrier or the platform failed; nothing was half-done and a retry is safe.
    Unavailable {
        /// Where it failed: `platform` (D1, a queue, R2, a Durable Object), `carrier`, `call
        /// machine`, `store` (an answer the store's statements rule out), `injected fault` (the
        /// test build's switches), `test build`.
        what: &'static str,
        /// What it said.
        cause: String,
    },
}

/// Why a bearer credential was refused (401): each says what to check, and none says whether a
/// key or session exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The request has no `Authorization` header.
    NoHeader,
    /// The header is not `Bearer <token>`.
    NotBearer,
    /// `/v1` was given a token that is no live API key.
    NotAKey,
    /// `/v1` was given a portal session token that is no live session.
    NotASession,
    /// `/v1` was given the admin token.
    AdminTokenOnV1,
    /// `/admin` was given an account's API key or portal session token.
    AccountKeyOnAdmin,
    /// `/admin` was given a token that is not the admin token.
    NotTheAdminToken,
    /// The caller's credential does not reach this (a portal session where a key is needed).
    NotThisCredential,
}

impl Refused {
    /// What the 401 says.
    pub fn message(self) -> &'static str {
        match self {
            Refused::NoHeader => "no Authorization header: send `Authorization: Bearer <API key>`",
            Refused::NotBearer => "the Authorization header must read `Authorization: Bearer <token>`",
            Refused::NotAKey => "the bearer token is not a valid API key (mistyped, revoked, or another deployment's)",
            Refused::NotASession => "the portal session token is not valid (mistyped, revoked or expired)",
            Refused::AdminTokenOnV1 => {
                "that is the admin token, which only /admin takes: /v1 takes an account's API key"
            }
            Refused::AccountKeyOnAdmin => "/admin takes the ADMIN_TOKEN, not an account's key or portal session",
            Refused::NotTheAdminToken => "the bearer token does not match ADMIN_TOKEN",
            Refused::NotThisCredential => "this route takes an account's API key, not a portal session",
        }
    }
}

exactly_core::text_enum! {
    /// Why a request conflicts with a resource's state: its `error.code` (docs/openapi.json
    /// enumerates each operation's).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Conflict {
        /// The Idempotency-Key was used for a different request (answered 422, not 409).
        IdempotencyKeyReused = "idempotency_key_reused",
        /// A request with the Idempotency-Key is still running.
        IdempotencyKeyInUse = "idempotency_key_in_use",
        /// The message is no longer scheduled, so it cannot be canceled.
        NotScheduled = "not_scheduled",
        /// No enabled endpoint is subscribed to the event's type.
        NoEndpoint = "no_endpoint",
        /// The number belongs to an account already.
        NumberTaken = "number_taken",
        /// The number to erase belongs to an account.
        NumberOwned = "number_owned",
        /// Only a failed delivery is re-driven.
        NotFailed = "not_failed",
        /// The shards are not where the map says, or are moving between other databases.
        ShardMove = "shard_move_conflict",
        /// The account's last live `full` API key cannot be revoked by the account.
        LastFullKey = "last_full_key",
        /// The account holds as many live API keys as it may.
        KeyLimit = "key_limit",
        /// The account holds as many live portal sessions as it may.
        SessionLimit = "session_limit",
        /// The account holds as many endpoints as it may.
        EndpointLimit = "endpoint_limit",
    }
}

impl EdgeError {
    /// An error from a D1 call, a queue send or another platform binding.
    pub fn platform(context: &str, error: impl fmt::Display) -> Self {
        EdgeError::Unavailable { what: "platform", cause: format!("{context}: {error}") }
    }

    /// A failure at `what` (see [`EdgeError::Unavailable`]) that a retry may get past.
    pub fn unavailable(what: &'static str, cause: impl fmt::Display) -> Self {
        EdgeError::Unavailable { what, cause: cause.to_string() }
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
                    Rejection::Malformed(_) => 400,
                };
                (status, r.code(), r.to_string(), None)
            }
            EdgeError::Unauthorized(why) => (401, "unauthorized", why.message().into(), None),
            EdgeError::NoRoute => (404, "no_route", "no such route".into(), None),
            EdgeError::NotFound => (404, "not_found", "not found".into(), None),
            EdgeError::Forbidden(e) => {
                let code = match e {
                    exactly_core::media::LinkError::Expired => "link_expired",
                    exactly_core::media::LinkError::BadSignature => "invalid_link",
                };
                (403, code, e.to_string(), None)
            }
            EdgeError::NotPermitted(refusal) => (403, "forbidden", refusal.to_string(), None),
            EdgeError::MediaNotStored => {
                (404, "media_not_stored", "the media item has not been copied from the carrier".into(), None)
            }
            EdgeError::MethodNotAllowed { .. } => {
                (405, "method_not_allowed", "method not allowed on this route".into(), None)
            }
            EdgeError::BadRequest(message) => (400, "bad_request", message.clone(), None),
            EdgeError::BodyTooLarge { max } => {
                (413, "body_too_large", format!("the request body is larger than {max} bytes"), None)
            }
            EdgeError::Invalid { field, message } => (422, "invalid_field", format!("{field}: {message}"), Some(field)),
            // A key reused for another request is a fault of the request, as any invalid field.
            EdgeError::Conflict { code: Conflict::IdempotencyKeyReused, message } => {
                (422, Conflict::IdempotencyKeyReused.as_str(), message.clone(), None)
            }
            EdgeError::Conflict { code, message } => (409, code.as_str(), message.clone(), None),
            EdgeError::RateLimited { retry_after } => {
                (429, "rate_limited", format!("too many requests; retry after {retry_after} s"), None)
            }
            EdgeError::Config { variable, problem } => {
                (503, "misconfigured", format!("configuration variable {variable} {problem}"), None)
            }
            // Internal detail goes to the log, not to the caller.
            EdgeError::Unavailable { .. } => (503, "unavailable", "temporarily unavailable, retry later".into(), None),
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
        if code == Conflict::IdempotencyKeyInUse.as_str() {
            response.headers_mut().set("retry-after", "1")?;
        }
        if let EdgeError::MethodNotAllowed { allow } = self {
            response.headers_mut().set("allow", allow)?;
        }
        if let EdgeError::RateLimited { retry_after } = self {
            response.headers_mut().set("retry-after", &retry_after.to_string())?;
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
            EdgeError::Unavailable { what, cause } => write!(f, "unavailable: {what}: {cause}"),
            other => f.write_str(&other.parts().2),
        }
    }
}

impl From<Rejection> for EdgeError {
    fn from(r: Rejection) -> Self {
        EdgeError::Rejected(r)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use exactly_core::media::LinkError;
    use exactly_core::{PayloadError, Rejection, SignatureError};

    use super::{Conflict, EdgeError};

    /// One error of each kind the edge answers with (a new variant fails to compile here until
    /// it is added, and then must be in the document).
    fn one_of_each() -> Vec<EdgeError> {
        let mut all = vec![
            EdgeError::Rejected(Rejection::Unauthenticated(SignatureError::Stale)),
            EdgeError::Rejected(Rejection::Malformed(PayloadError::NotParseable)),
            EdgeError::Rejected(Rejection::TooLarge { limit: 1 }),
            EdgeError::Unauthorized(super::Refused::NoHeader),
            EdgeError::NotFound,
            EdgeError::Forbidden(LinkError::Expired),
            EdgeError::Forbidden(LinkError::BadSignature),
            EdgeError::NotPermitted(exactly_core::access::Refusal::Scope),
            EdgeError::MediaNotStored,
            EdgeError::BadRequest(String::new()),
            EdgeError::BodyTooLarge { max: 1 },
            EdgeError::invalid("to", "x"),
            EdgeError::Config { variable: "ADMIN_TOKEN", problem: String::new() },
            EdgeError::unavailable("platform", "x"),
            EdgeError::RateLimited { retry_after: 1 },
        ];
        all.extend(Conflict::ALL.map(|code| EdgeError::Conflict { code, message: String::new() }));
        for e in &all {
            // Exhaustive: the routing errors (no route, no such method) belong to no operation.
            match e {
                EdgeError::NoRoute | EdgeError::MethodNotAllowed { .. } => unreachable!(),
                EdgeError::Rejected(_)
                | EdgeError::Unauthorized(_)
                | EdgeError::NotFound
                | EdgeError::Forbidden(_)
                | EdgeError::NotPermitted(_)
                | EdgeError::MediaNotStored
                | EdgeError::BadRequest(_)
                | EdgeError::BodyTooLarge { .. }
                | EdgeError::Invalid { .. }
                | EdgeError::Conflict { .. }
                | EdgeError::RateLimited { .. }
                | EdgeError::Config { .. }
                | EdgeError::Unavailable { .. } => {}
            }
        }
        all
    }

    /// The codes docs/openapi.json enumerates for each status, over every operation's answers.
    fn documented() -> BTreeMap<String, BTreeSet<String>> {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/openapi.json")).expect("docs/openapi.json is JSON");
        let resolve = |v: &serde_json::Value| -> serde_json::Value {
            let pointer = v["$ref"].as_str().map(|r| r.trim_start_matches('#').to_owned());
            pointer.and_then(|p| doc.pointer(&p).cloned()).unwrap_or_else(|| v.clone())
        };
        let mut codes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for item in doc["paths"].as_object().expect("paths").values() {
            for op in item.as_object().expect("a path item").values() {
                for (status, answer) in op["responses"].as_object().into_iter().flatten() {
                    let answer = resolve(answer);
                    let schema = &answer["content"]["application/json"]["schema"];
                    // One schema, or any of several.
                    let alternatives = schema["anyOf"].as_array().cloned().unwrap_or_else(|| vec![schema.clone()]);
                    for schema in alternatives.iter().map(resolve) {
                        let enumerated = &schema["properties"]["error"]["properties"]["code"]["enum"];
                        for code in enumerated.as_array().into_iter().flatten() {
                            let code = code.as_str().expect("a code").to_owned();
                            codes.entry(status.clone()).or_default().insert(code);
                        }
                    }
                }
            }
        }
        codes
    }

    #[test]
    fn every_error_code_is_documented_for_its_status_and_none_other() {
        let documented = documented();
        let mut answered: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for e in one_of_each() {
            let (status, code, _, _) = e.parts();
            answered.entry(status.to_string()).or_default().insert(code.to_owned());
        }
        assert_eq!(documented, answered, "docs/openapi.json's error codes, by status, against the edge's");
    }

    /// An `Idempotency-Key` over its documented length is refused as an invalid field by every
    /// operation that takes one (`api::idempotency`), so each documents that answer.
    #[test]
    fn every_operation_taking_an_idempotency_key_documents_its_invalid_field_answer() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../docs/openapi.json")).expect("docs/openapi.json is JSON");
        let mut missing = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("a path item") {
                let parameters = op["parameters"].as_array().cloned().unwrap_or_default();
                if !parameters.iter().any(|p| p["$ref"] == "#/components/parameters/IdempotencyKey") {
                    continue;
                }
                let schema = &op["responses"]["422"]["content"]["application/json"]["schema"];
                let alternatives = schema["anyOf"].as_array().cloned().unwrap_or_else(|| vec![schema.clone()]);
                if !alternatives.iter().any(|a| a["$ref"] == "#/components/schemas/InvalidFieldError") {
                    missing.push(format!("{method} {path}"));
                }
            }
        }
        assert!(missing.is_empty(), "422 without InvalidFieldError: {missing:?}");
    }
}
