//! The wasm floor: `bench/floor/ingest.js` and `bench/floor/e2e.js` as a Rust worker, built
//! the way the product is (workers-rs and wasm-bindgen, release with LTO, `wasm-opt -Oz`), doing
//! the same I/O and nothing else. Ingest: the body read, the D1 insert (+ read-back) in one
//! batch, the jobs queue send for a new event, a JSON answer. A job: one D1 batch that writes
//! the message, its outbox event and its delivery and marks the event processed, then the
//! deliveries queue send. A delivery: the POST to `ENDPOINT_URL` beside the batch
//! (`waitUntil`), then one D1 batch that records it. No verification, no parsing, no rules.
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
//! the payload handed back to D1 as a string; and each delivery is signed as the product signs
//! it (`SigningSecret::parse` and `sign`, the body read into wasm). A job does not parse the
//! stored event again, as the product's processing does (`parse_stored`): the floor's job
//! statements derive everything in SQL.

use js_sys::{Array, Function, Promise, Reflect};
use wasm_bindgen::{JsCast as _, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{event, Context, Env, MessageBatch, MessageExt as _, RawMessage};

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
export function delivery(id, event, body) {
    return { id: 'dlv_' + id, event, body };
}
export function header(request, name) {
    return request.headers.get(name);
}
export function describe(error) {
    return String(error);
}
export function post(url, event, body, signature, timestamp) {
    const headers = { 'content-type': 'application/json', 'webhook-id': event };
    if (signature !== undefined) {
        headers['webhook-signature'] = signature;
        headers['webhook-timestamp'] = timestamp;
    }
    return fetch(url, { method: 'POST', headers, body });
}
")]
extern "C" {
    #[wasm_bindgen(catch)]
    fn job(id: &JsValue) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    fn answer(id: &JsValue, accepted: bool) -> Result<web_sys::Response, JsValue>;
    #[wasm_bindgen(catch)]
    fn header(request: &web_sys::Request, name: &str) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    fn describe(error: &JsValue) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    fn delivery(id: &JsValue, event: &JsValue, body: &JsValue) -> Result<JsValue, JsValue>;
    #[wasm_bindgen(catch)]
    fn post(
        url: &JsValue,
        event: &JsValue,
        body: &JsValue,
        signature: Option<String>,
        timestamp: Option<String>,
    ) -> Result<Promise, JsValue>;
}

/// The account the benchmark writes before the load (as for `bench/floor/e2e.js`).
const ACCOUNT: &str = "acct_floor";

const JOB: [&str; 4] = [
    "INSERT INTO messages (id, account_id, direction, from_number, to_number, text, segments, encoding, status, carrier, \
     carrier_message_id, created_at, updated_at)
     SELECT 'msg_' || id, ?2, 'inbound', '+15559990000', '+15550000000', payload, 1, 'gsm7', 'received', 'telnyx', \
     'msg-' || carrier_event_id, ?3, ?3
     FROM carrier_events WHERE id = ?1
     ON CONFLICT (carrier, carrier_message_id) DO NOTHING",
    "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at)
     SELECT 'evt_' || id, ?2, 'message.received', 'msg_' || id,
            json_object('type', 'message.received', 'data', json_object('carrier_message_id', 'msg-' || carrier_event_id, \
            'text', payload)), ?3
     FROM carrier_events WHERE id = ?1
     ON CONFLICT DO NOTHING
     RETURNING id, payload",
    "INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, next_attempt_at, created_at, updated_at)
     SELECT 'dlv_' || id, 'evt_' || id, 'ep_floor', ?2, 'initial', 'pending', ?3, ?3, ?3
     FROM carrier_events WHERE id = ?1
     ON CONFLICT DO NOTHING",
    "UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS NULL",
];

const RECORD: [&str; 2] = [
    "UPDATE webhook_deliveries SET status = ?2, attempts = attempts + 1, last_error = ?3, updated_at = ?4 \
     WHERE id = ?1 AND status = 'pending'",
    "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms, error) \
     VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
];

fn get(target: &JsValue, key: &str) -> JsValue {
    Reflect::get(target, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `db.prepare(sql).bind(...values)`.
fn prepare(db: &JsValue, sql: &str, values: &[&JsValue]) -> Result<JsValue, JsValue> {
    let prepare: Function = get(db, "prepare").dyn_into()?;
    let statement = prepare.call1(db, &JsValue::from_str(sql))?;
    let bind: Function = get(&statement, "bind").dyn_into()?;
    Reflect::apply(&bind, &statement, &values.iter().copied().collect::<Array>())
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
    let event_id = header(req, "x-event-id")?;
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
    let now = JsValue::from_f64(js_sys::Date::now());
    let statements = Array::of2(&prepare(&db, INSERT, &[event_id, body, &now])?, &prepare(&db, SELECT, &[event_id])?);
    let results = call(&db, "batch", &Array::of1(&statements)).await?;
    let (inserted, selected) = (Reflect::get_u32(&results, 0)?, Reflect::get_u32(&results, 1)?);
    let accepted = get(&get(&inserted, "meta"), "changes").as_f64() == Some(1.0);
    let id = get(&Reflect::get_u32(&get(&selected, "results"), 0)?, "id");
    if accepted {
        call(&get(env, "JOBS"), "send", &Array::of1(&job(&id)?)).await?;
    }
    answer(&id, accepted)
}

#[event(queue)]
async fn queue(batch: MessageBatch<JsValue>, env: Env, ctx: Context) -> worker::Result<()> {
    if batch.queue() == "exactly-jobs" {
        // Every message of the batch at once; one that fails is retried.
        let messages: Vec<RawMessage> = batch.raw_iter().collect();
        futures_util::future::join_all(messages.iter().map(|message| async {
            match process(&env, &message.body()).await {
                Ok(()) => message.ack(),
                Err(e) => {
                    worker::console_error!("job: {e:?}");
                    message.retry();
                }
            }
        }))
        .await;
    } else {
        for message in batch.raw_iter() {
            let (env, body) = (env.clone(), message.body());
            ctx.wait_until(async move {
                if let Err(e) = deliver(&env, &body).await {
                    worker::console_error!("delivery: {e:?}");
                }
            });
            message.ack();
        }
    }
    Ok(())
}

/// The message, its outbox event and its delivery in one batch, then the delivery enqueued.
async fn process(env: &Env, body: &JsValue) -> Result<(), JsValue> {
    let id = get(body, "id");
    let (db, account, now) = (get(env, "DB"), JsValue::from_str(ACCOUNT), JsValue::from_f64(js_sys::Date::now()));
    let statements: Array = JOB
        .iter()
        .enumerate()
        .map(
            |(n, sql)| if n == 3 { prepare(&db, sql, &[&id, &now]) } else { prepare(&db, sql, &[&id, &account, &now]) },
        )
        .collect::<Result<_, _>>()?;
    let results = call(&db, "batch", &Array::of1(&statements)).await?;
    let events: Array = get(&Reflect::get_u32(&results, 1)?, "results").dyn_into()?;
    for event in events.iter() {
        let message = delivery(&id, &get(&event, "id"), &get(&event, "payload"))?;
        call(&get(env, "DELIVERIES"), "send", &Array::of1(&message)).await?;
    }
    Ok(())
}

/// The POST to the customer's endpoint, then its record.
async fn deliver(env: &Env, message: &JsValue) -> Result<(), JsValue> {
    let (id, event, body) = (get(message, "id"), get(message, "event"), get(message, "body"));
    let started = js_sys::Date::now();
    let (signature, timestamp) = sign(&event, &body, started);
    let (mut status, mut error) = (JsValue::NULL, JsValue::NULL);
    // As the JavaScript floor's try: any failure of the POST or of reading its answer is
    // recorded as the attempt's error.
    let attempt = async {
        let response: web_sys::Response =
            JsFuture::from(post(&get(env, "ENDPOINT_URL"), &event, &body, signature, timestamp)?).await?.dyn_into()?;
        JsFuture::from(response.array_buffer()?).await?;
        Ok::<_, JsValue>(response.status())
    };
    match attempt.await {
        Ok(code) => status = JsValue::from(code),
        Err(e) => error = describe(&e)?,
    }
    let now = js_sys::Date::now();
    let succeeded = status.as_f64().is_some_and(|s| s < 300.0);
    let db = get(env, "DB");
    let (outcome, now, started_at) = (
        JsValue::from_str(if succeeded { "succeeded" } else { "failed" }),
        JsValue::from_f64(now),
        JsValue::from_f64(started),
    );
    let statements = Array::of2(
        &prepare(&db, RECORD[0], &[&id, &outcome, &error, &now])?,
        &prepare(
            &db,
            RECORD[1],
            &[
                &id,
                &started_at,
                &JsValue::from_f64((started / 1000.0).floor()),
                &status,
                &JsValue::from_f64(now.as_f64().unwrap_or(started) - started),
                &error,
            ],
        )?,
    );
    call(&db, "batch", &Array::of1(&statements)).await?;
    Ok(())
}

/// No signature: the floor does no work of its own.
#[cfg(not(feature = "core"))]
fn sign(_event: &JsValue, _body: &JsValue, _now: f64) -> (Option<String>, Option<String>) {
    (None, None)
}

/// The delivery's `webhook-signature` and `webhook-timestamp`, as the product signs an attempt.
#[cfg(feature = "core")]
fn sign(event: &JsValue, body: &JsValue, now: f64) -> (Option<String>, Option<String>) {
    use exactly_core::{webhook::SigningSecret, Timestamp};
    // Parsed at every attempt, as the product reads an endpoint's stored secret.
    let Ok(secret) = SigningSecret::parse("whsec_YmVuY2gtd2FzbS1mbG9vci1zaWduaW5nLXNlY3JldCE=") else {
        return (None, None);
    };
    let now = Timestamp::from_unix_millis(now as i64);
    let (event, body) = (event.as_string().unwrap_or_default(), body.as_string().unwrap_or_default());
    (Some(secret.sign(&event, now, body.as_bytes())), Some(now.unix_seconds().to_string()))
}
