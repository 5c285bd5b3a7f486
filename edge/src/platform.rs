//! The few platform facts the core needs passed in: the time, random bytes, and the runtime's
//! WHATWG URL parser.

use exactly_core::endpoint::{EndpointUrl, Parsed, UrlProblem};
use exactly_core::id::{prefixed, IdBytes};
use exactly_core::Timestamp;

use crate::error::EdgeError;

/// The current time from the Workers runtime.
pub fn now() -> Timestamp {
    // `Date.now()` is whole milliseconds, well inside i64.
    Timestamp::from_unix_millis(worker::Date::now().as_millis() as i64)
}

/// A new resource id with `prefix`, from the platform's CSPRNG.
pub fn new_id(prefix: &str) -> Result<String, EdgeError> {
    let mut bytes: IdBytes = [0; 16];
    getrandom::getrandom(&mut bytes).map_err(|e| EdgeError::platform("random", e))?;
    Ok(prefixed(prefix, &bytes))
}

/// `len` random bytes from the platform's CSPRNG, as lowercase hex.
pub fn random_hex(len: usize) -> Result<String, EdgeError> {
    let mut bytes = vec![0u8; len];
    getrandom::getrandom(&mut bytes).map_err(|e| EdgeError::platform("random", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A request built on the runtime's own `RequestInit`: the worker crate's carries Cloudflare's
/// image-resizing options, whose conversion the bundle would hold for requests that never set
/// them. `follow_redirects: false` is `redirect: "manual"`.
pub fn request(
    method: &str,
    url: &str,
    headers: Option<&worker::Headers>,
    body: Option<&str>,
    follow_redirects: bool,
) -> Result<worker::Request, InvalidRequest> {
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    if let Some(headers) = headers {
        init.set_headers(headers.as_ref());
    }
    if let Some(body) = body {
        init.set_body(&body.into());
    }
    if !follow_redirects {
        init.set_redirect(web_sys::RequestRedirect::Manual);
    }
    web_sys::Request::new_with_str_and_init(url, &init)
        .map(worker::Request::from)
        .map_err(|e| InvalidRequest(e.as_string().unwrap_or_else(|| "invalid URL or options for Request".to_owned())))
}

/// Why the runtime would not build a request (an invalid URL, say), in its own words.
#[derive(Debug)]
pub struct InvalidRequest(String);

impl std::fmt::Display for InvalidRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why [`fetch`] got no answer: no status came.
#[derive(Debug)]
pub enum NoAnswer {
    /// The connection failed, or broke before a status came.
    Network(String),
    /// No status within the deadline.
    Timeout(std::time::Duration),
}

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoAnswer::Network(e) => write!(f, "network: {e}"),
            NoAnswer::Timeout(after) => write!(f, "no answer within {}s", after.as_secs()),
        }
    }
}

#[wasm_bindgen::prelude::wasm_bindgen(inline_js = "
export function json_response(body) {
    return new Response(body, { headers: { 'content-type': 'application/json' } });
}
export function whole_body(stream) {
    return new Response(stream).arrayBuffer();
}
export function fixed_length(stream, length) {
    return stream.pipeThrough(new FixedLengthStream(length));
}
")]
extern "C" {
    /// A `200` JSON response of `body`, built in one call into the runtime (the worker crate's
    /// builder makes a `Headers`, a `ResponseInit` and a byte copy, each a crossing).
    #[wasm_bindgen(catch)]
    pub fn json_response(body: &str) -> Result<web_sys::Response, wasm_bindgen::JsValue>;

    /// The promise of `stream`'s bytes, read whole by the runtime.
    #[wasm_bindgen(catch)]
    fn whole_body(stream: &wasm_bindgen::JsValue) -> Result<js_sys::Promise, wasm_bindgen::JsValue>;

    /// `stream` through a `FixedLengthStream` of `length` bytes: a body that a binding (R2)
    /// takes as it comes, never whole in the worker's memory, and that fails if it is not
    /// `length` bytes long.
    #[wasm_bindgen(catch)]
    pub fn fixed_length(
        stream: &wasm_bindgen::JsValue,
        length: f64,
    ) -> Result<web_sys::ReadableStream, wasm_bindgen::JsValue>;
}

/// A server's answer to [`open`] whose body is still unread.
pub struct Opened {
    pub status: u16,
    pub headers: worker::Headers,
    response: worker::Response,
    controller: worker::AbortController,
}

impl Opened {
    /// The body as the runtime's stream, for a caller that passes it on unread (none when the
    /// answer has no body).
    pub fn body(&self) -> Option<wasm_bindgen::JsValue> {
        match self.response.body() {
            worker::ResponseBody::Stream(stream) => Some(stream.clone().into()),
            _ => None,
        }
    }

    /// Ends the exchange: what has not come of the body is not read, and no connection stays open.
    pub fn abort(self) {
        self.controller.abort();
    }
}

/// Sends `request` and waits, at most `timeout`, for the answer's status and headers, leaving its
/// body to the caller ([`Opened`]), who passes it on or aborts it.
pub async fn open(request: worker::Request, timeout: std::time::Duration) -> Result<Opened, NoAnswer> {
    use futures_util::future::{select, Either};
    crate::quotas::subrequest("fetch").map_err(|e| NoAnswer::Network(e.to_string()))?;
    let controller = worker::AbortController::default();
    let signal = controller.signal();
    let timer = worker::Delay::from(timeout);
    let fetch = worker::Fetch::Request(request);
    let sent = fetch.send_with_signal(&signal);
    futures_util::pin_mut!(sent);
    match select(sent, timer).await {
        Either::Left((Ok(response), _)) => {
            Ok(Opened { status: response.status_code(), headers: response.headers().clone(), response, controller })
        }
        Either::Left((Err(e), _)) => Err(NoAnswer::Network(e.to_string())),
        Either::Right(_) => {
            controller.abort();
            Err(NoAnswer::Timeout(timeout))
        }
    }
}

/// What a server answered to [`fetch`]: the status, the headers and the body as far as it was
/// read.
pub struct Answer {
    pub status: u16,
    pub headers: worker::Headers,
    /// The body, at most the limit the caller gave.
    pub body: Vec<u8>,
    /// Why `body` is not the whole body, if it is not.
    pub cut: Option<Cut>,
}

/// Why an answer's body was not read whole.
pub enum Cut {
    /// It is longer than the caller's limit (by its declared length, or by the bytes that came).
    OverLimit,
    /// It broke off, or did not end before the deadline.
    Broken(String),
}

/// Whether a body with this `Content-Encoding` is encoded (compressed): any value but none,
/// blank or `identity`.
pub fn is_encoded(content_encoding: Option<&str>) -> bool {
    content_encoding.map(str::trim).is_some_and(|e| !e.is_empty() && !e.eq_ignore_ascii_case("identity"))
}

/// What [`fetch`] does with a body longer than its limit.
#[derive(Clone, Copy)]
pub enum Longer {
    /// Leaves it unread when its declared length says so (a media item too large to keep).
    Unread,
    /// Keeps its first bytes, up to the limit (the start of an endpoint's error page).
    Start,
}

/// Sends `request` and reads the answer, status to last byte (at most `max_body` bytes of
/// body, and what `longer` says of a longer one), all within `timeout`. [`NoAnswer`] when no status came; a body
/// that did not come whole is an [`Answer`] with its [`Cut`].
///
/// Nothing of the exchange outlives the call: whatever did not finish (the request, a body
/// longer than `max_body`, a body still arriving at the deadline) is aborted before it returns,
/// so no connection is left open and no late answer arrives afterwards, and the timer is
/// cleared.
pub async fn fetch(
    request: worker::Request,
    timeout: std::time::Duration,
    max_body: usize,
    longer: Longer,
) -> Result<Answer, NoAnswer> {
    use futures_util::future::{select, Either};
    use futures_util::StreamExt as _;
    crate::quotas::subrequest("fetch").map_err(|e| NoAnswer::Network(e.to_string()))?;
    let controller = worker::AbortController::default();
    let signal = controller.signal();
    let timer = worker::Delay::from(timeout);
    futures_util::pin_mut!(timer);
    let fetch = worker::Fetch::Request(request);
    let sent = fetch.send_with_signal(&signal);
    futures_util::pin_mut!(sent);
    let mut response = match select(sent, timer.as_mut()).await {
        Either::Left((Ok(response), _)) => response,
        Either::Left((Err(e), _)) => return Err(NoAnswer::Network(e.to_string())),
        Either::Right(_) => {
            controller.abort();
            return Err(NoAnswer::Timeout(timeout));
        }
    };
    let status = response.status_code();
    let headers = response.headers().clone();
    let declared = headers.get("content-length").ok().flatten().and_then(|n| n.trim().parse::<u64>().ok());
    let mut body = Vec::new();
    let over = declared.is_some_and(|n| n > max_body as u64);
    let mut cut = (over && matches!(longer, Longer::Unread)).then_some(Cut::OverLimit);
    // A body whose declared length is within the limit is read whole by the runtime, as one
    // promise: no reader in the worker, whose every read and release is a crossing (for a short
    // reply the reader's release costs more than the read). Its length bounds what comes only
    // when it is not encoded: the runtime decodes a compressed body, whose declared length is
    // the compressed one, so that one goes through the reader, which stops at the limit.
    let encoded = is_encoded(headers.get("content-encoding").ok().flatten().as_deref());
    let whole = match (&cut, declared, response.body()) {
        (None, Some(_), worker::ResponseBody::Stream(stream)) if !over && !encoded => Some(whole_body(stream)),
        _ => None,
    };
    if let Some(promise) = whole {
        let read = async {
            let bytes = worker::wasm_bindgen_futures::JsFuture::from(promise?).await?;
            Ok::<_, wasm_bindgen::JsValue>(js_sys::Uint8Array::new(&bytes).to_vec())
        };
        futures_util::pin_mut!(read);
        cut = match select(read, timer.as_mut()).await {
            Either::Left((Ok(bytes), _)) if bytes.len() > max_body => {
                body = bytes;
                body.truncate(max_body);
                Some(Cut::OverLimit)
            }
            Either::Left((Ok(bytes), _)) => {
                body = bytes;
                None
            }
            Either::Left((Err(e), _)) => Some(Cut::Broken(format!("reading the body: {}", worker::Error::from(e)))),
            Either::Right(_) => Some(Cut::Broken(format!("the body did not end within {}s", timeout.as_secs()))),
        };
    } else if let (None, Ok(stream)) = (&cut, response.stream()) {
        // A response without a body has no stream to read.
        futures_util::pin_mut!(stream);
        cut = loop {
            match select(stream.next(), timer.as_mut()).await {
                Either::Left((None, _)) => break None,
                Either::Left((Some(Ok(chunk)), _)) => {
                    let room = max_body - body.len();
                    if chunk.len() > room {
                        body.extend_from_slice(&chunk[..room]);
                        break Some(Cut::OverLimit);
                    }
                    body.extend_from_slice(&chunk);
                }
                Either::Left((Some(Err(e)), _)) => break Some(Cut::Broken(format!("reading the body: {e}"))),
                Either::Right(_) => {
                    break Some(Cut::Broken(format!("the body did not end within {}s", timeout.as_secs())))
                }
            }
        };
    }
    if cut.is_some() {
        controller.abort();
    }
    Ok(Answer { status, headers, body, cut })
}

/// A random `u32` (for jitter).
pub fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    // Without randomness the jitter is merely absent; nothing else depends on it.
    let _ = getrandom::getrandom(&mut bytes);
    u32::from_le_bytes(bytes)
}

/// Parses and checks a customer endpoint URL (`core::endpoint`) with the runtime's own `URL`,
/// the parser `fetch` applies to the text it is given.
pub fn endpoint_url(text: &str, allow_private: bool) -> Result<EndpointUrl, UrlProblem> {
    EndpointUrl::parse_with(text, allow_private, parse_url)
}

/// Checks an outbound media URL (`core::media`) with the runtime's own `URL`.
pub fn media_url(text: &str) -> Result<String, exactly_core::media::MediaUrlError> {
    exactly_core::media::parse_outbound_url_with(text, parse_url)
}

/// The runtime's WHATWG `URL`: `None` when its constructor throws.
#[cfg(target_arch = "wasm32")]
fn parse_url(text: &str) -> Option<Parsed> {
    let url = web_sys::Url::new(text).ok()?;
    let protocol = url.protocol();
    Some(Parsed {
        href: url.href(),
        scheme: protocol.strip_suffix(':').unwrap_or(&protocol).to_owned(),
        username: url.username(),
        password: url.password(),
        hostname: url.hostname(),
    })
}

/// Native builds (the unit tests) have no runtime: the `url` crate implements the same standard.
#[cfg(not(target_arch = "wasm32"))]
fn parse_url(text: &str) -> Option<Parsed> {
    exactly_core::endpoint::parse_whatwg(text)
}

/// A redirect's `Location` resolved against the URL that answered it, with the runtime's `URL`
/// (`None` when it is no URL).
#[cfg(target_arch = "wasm32")]
pub fn resolve_url(base: &str, reference: &str) -> Option<String> {
    web_sys::Url::new_with_base(reference, base).ok().map(|u| u.href())
}

/// Native builds resolve with the `url` crate, which implements the same standard.
#[cfg(not(target_arch = "wasm32"))]
pub fn resolve_url(base: &str, reference: &str) -> Option<String> {
    exactly_core::endpoint::resolve_whatwg(base, reference)
}

/// The stub of the Durable Object that owns call `call_id` (named by the call's id), for one
/// request: each stub counts as the subrequest it is made for.
pub fn call_stub(env: &worker::Env, call_id: &str) -> Result<worker::Stub, EdgeError> {
    crate::quotas::subrequest("CALL_RING")?;
    let namespace =
        env.durable_object(crate::bindings::CALL_RING).map_err(|e| EdgeError::platform("CALL_RING binding", e))?;
    namespace.id_from_name(call_id).and_then(|id| id.get_stub()).map_err(|e| EdgeError::platform("call stub", e))
}
