//! The wasm floor: `bench/floor/ingest.js` as a Rust worker, built the way the product is
//! (workers-rs and wasm-bindgen, release with LTO, `wasm-opt -Oz`), doing the same I/O and
//! nothing else: the body read, the D1 insert (+ read-back) in one batch, the jobs queue send for
//! a new event, a JSON answer. No verification, no parsing, no rules.
//!
//! Every call into the runtime is made the cheapest way the product knows (docs/benchmarks.md,
//! "Profiles"): the runtime's own request, `batch` called directly, fields read from D1's
//! objects, the queue message and the answer built in JavaScript. What this worker costs over
//! the JavaScript floor is what any Rust worker pays on this path for crossing into wasm and
//! back; `make bench` measures the product's ingest against it.
//!
//! With the `core` feature (`bench/wasm-floor/build-core`) each request also goes through the
//! product's core as the product's ingest does: the body read into wasm, the Telnyx signature
//! checked and the envelope parsed (`telnyx::Verifier::verify`), the event id taken from it and
//! the payload handed back to D1 as a string.

use js_sys::{Array, Function, Promise, Reflect};
use wasm_bindgen::{JsCast as _, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{event, Context, Env};

const INSERT: &str =
    "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at) \
     VALUES ('telnyx', ?1, 'message.received', ?2, 0, ?3) ON CONFLICT (carrier, carrier_event_id) DO NOTHING";
const SELECT: &str = "SELECT CAST(id AS TEXT) AS id, processed_at, error FROM carrier_events \
     WHERE carrier = 'telnyx' AND carrier_event_id = ?1";

#[wasm_bindgen::prelude::wasm_bindgen(inline_js = "
export function job(id) {
    return { type: 'carrier_event', id };
}
export function answer(id, accepted) {
    return Response.json({ id, outcome: accepted ? 'accepted' : 'duplicate' });
}
")]
extern "C" {
    fn job(id: &JsValue) -> JsValue;
    #[wasm_bindgen(catch)]
    fn answer(id: &JsValue, accepted: bool) -> Result<web_sys::Response, JsValue>;
}

fn get(target: &JsValue, key: &str) -> JsValue {
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// Calls `target.method(...args)` and waits for the promise it returns.
async fn call(target: &JsValue, method: &str, args: &Array) -> Result<JsValue, JsValue> {
    let function: Function = get(target, method).dyn_into()?;
    let promise: Promise = Reflect::apply(&function, target, args)?.dyn_into()?;
    JsFuture::from(promise).await
}

#[event(fetch)]
async fn fetch(req: web_sys::Request, env: Env, _ctx: Context) -> worker::Result<web_sys::Response> {
    ingest(&req, &env).await.map_err(|e| worker::Error::JsError(format!("{e:?}")))
}

#[cfg(not(feature = "core"))]
async fn ingest(req: &web_sys::Request, env: &Env) -> Result<web_sys::Response, JsValue> {
    let body = JsFuture::from(req.text()?).await?;
    let event_id = JsValue::from(req.headers().get("x-event-id")?);
    store_and_enqueue(env, &event_id, &body).await
}

#[cfg(feature = "core")]
async fn ingest(req: &web_sys::Request, env: &Env) -> Result<web_sys::Response, JsValue> {
    use exactly_core::{telnyx, Timestamp};
    thread_local! {
        // The key, read once per isolate as the product's configuration is.
        static VERIFIER: std::cell::OnceCell<Option<telnyx::Verifier>> = const { std::cell::OnceCell::new() };
    }
    let body = JsFuture::from(req.array_buffer()?).await?;
    let body = js_sys::Uint8Array::new(&body).to_vec();
    let headers = req.headers();
    let (signature, timestamp) = (headers.get(telnyx::SIGNATURE_HEADER)?, headers.get(telnyx::TIMESTAMP_HEADER)?);
    let now = Timestamp::from_unix_millis(js_sys::Date::now() as i64);
    let verified = VERIFIER.with(|verifier| {
        let verifier = verifier
            .get_or_init(|| telnyx::Verifier::from_base64_keys(&get(env, "TELNYX_PUBLIC_KEY").as_string()?).ok())
            .as_ref()
            .ok_or_else(|| JsValue::from_str("TELNYX_PUBLIC_KEY is not a key"))?;
        let headers = telnyx::Headers { signature: signature.as_deref(), timestamp: timestamp.as_deref() };
        verifier.verify(headers, &body, now).map_err(|e| JsValue::from_str(&e.to_string()))
    })?;
    let payload = std::str::from_utf8(&body).map_err(|e| JsValue::from_str(&e.to_string()))?;
    store_and_enqueue(env, &JsValue::from_str(&verified.event().event_id), &JsValue::from_str(payload)).await
}

/// The floor's I/O: one D1 batch (insert-or-ignore + read-back), a jobs queue send for a new
/// event, the answer.
async fn store_and_enqueue(env: &Env, event_id: &JsValue, body: &JsValue) -> Result<web_sys::Response, JsValue> {
    let db = get(env, "DB");
    let prepare = |sql: &str, values: &[&JsValue]| -> Result<JsValue, JsValue> {
        let prepare: Function = get(&db, "prepare").dyn_into()?;
        let statement = prepare.call1(&db, &JsValue::from_str(sql))?;
        let bind: Function = get(&statement, "bind").dyn_into()?;
        Reflect::apply(&bind, &statement, &values.iter().copied().collect::<Array>())
    };
    let now = JsValue::from_f64(js_sys::Date::now());
    let statements = Array::of2(&prepare(INSERT, &[event_id, body, &now])?, &prepare(SELECT, &[event_id])?);
    let results = call(&db, "batch", &Array::of1(&statements)).await?;
    let (inserted, selected) = (Reflect::get_u32(&results, 0)?, Reflect::get_u32(&results, 1)?);
    let accepted = get(&get(&inserted, "meta"), "changes").as_f64() == Some(1.0);
    let id = get(&Reflect::get_u32(&get(&selected, "results"), 0)?, "id");
    if accepted {
        call(&get(env, "JOBS"), "send", &Array::of1(&job(&id))).await?;
    }
    answer(&id, accepted)
}
