//! Ordered delivery per resource (docs/contract.md §6, "Ordered delivery per resource"): an
//! endpoint with `ordering: "resource"` receives each message's and each call's events in
//! `sequence` order, one at a time, whatever order the carrier's events came in, however often,
//! through a flapping endpoint and beside a hung one; an exhausted event is skipped and named in
//! the next request (`skip`) or holds its resource alone until it is delivered (`hold`).

use std::time::Duration;

use exactly_tests::{fresh_number, lit, Customer, Worker};
use serde_json::{json, Value};
use sim::customer::Received;

use crate::calls::{
    answered_then_hung_up, caller_hangup_before_a_retried_initiated, inbound_to,
    legs_hung_up_in_reverse_before_initiated, nobody_answers, ring_on, TARGETS,
};
use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] = &[
    (
        "ordering::each_resources_events_arrive_in_sequence_whatever_the_carriers_order",
        each_resources_events_arrive_in_sequence_whatever_the_carriers_order,
    ),
    (
        "ordering::an_exhausted_event_is_skipped_and_named_or_holds_its_resource_alone",
        an_exhausted_event_is_skipped_and_named_or_holds_its_resource_alone,
    ),
    (
        "ordering::an_event_its_filter_holds_back_hands_its_resource_on_at_once",
        an_event_its_filter_holds_back_hands_its_resource_on_at_once,
    ),
    (
        "ordering::held_resources_never_stand_in_line_ahead_of_a_fresh_one",
        held_resources_never_stand_in_line_ahead_of_a_fresh_one,
    ),
];

const MESSAGE_TYPES: [&str; 3] = ["message.sent", "message.delivered", "message.failed"];
const CALL_TYPES: [&str; 4] = ["call.initiated", "call.answered", "call.completed", "call.missed"];

/// An account whose number rings [`TARGETS`], so it both sends messages and takes calls.
fn customer(w: &Worker) -> Customer {
    let (account, key) = w.create_account("ordered");
    let number = fresh_number();
    w.create_number(&account, &number, &TARGETS);
    Customer { account, key, number }
}

/// An endpoint of `c` at `path` of the test customer server for `types`, with `extra` fields;
/// returns its id.
fn endpoint(w: &Worker, c: &Customer, path: &str, types: &[&str], extra: Value) -> String {
    let mut body = json!({"url": format!("{}{path}", w.customer.base), "event_types": types});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let a = w.call("POST", "/v1/webhook_endpoints", &c.key, Some(&body), &[]);
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(a.json()["ordering"], extra.get("ordering").cloned().unwrap_or(json!("none")), "{}", a.body);
    a.json()["id"].as_str().expect("an id").to_owned()
}

/// Sends a message from `c`'s number saying `text`; returns its id once the carrier took it
/// (`message.sent` written), and its carrier id.
fn sent(w: &Worker, c: &Customer, text: &str) -> (String, String) {
    let key = format!("key-{}", sim::random_hex());
    let body = json!({"from": c.number, "to": "+15559990000", "text": text});
    let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &[("idempotency-key", key.as_str())]);
    assert_eq!(a.status, 201, "{}", a.body);
    let id = a.json()["id"].as_str().expect("an id").to_owned();
    let carrier_id = w.wait_status(c, &id, "sent")["carrier_message_id"].as_str().unwrap_or_default().to_owned();
    (id, carrier_id)
}

/// Delivers the carrier's receipts for `carrier_id` in this order, each twice and once more
/// re-signed under a new event id.
fn receipts(w: &Worker, carrier_id: &str, order: &[&str]) {
    for status in order {
        let event_id = format!("r-{}", sim::random_hex());
        let body = sim::telnyx::receipt(&event_id, carrier_id, status, json!([]));
        for _ in 0..2 {
            assert_eq!(w.deliver_telnyx(&body).status, 200);
        }
        let resigned = sim::telnyx::receipt(&format!("{event_id}-resigned"), carrier_id, status, json!([]));
        assert_eq!(w.deliver_telnyx(&resigned).status, 200);
    }
}

/// The requests `path` received about `resource` (the body's `data.id`), in arrival order.
fn about(w: &Worker, path: &str, resource: &str) -> Vec<(Value, Received)> {
    w.customer
        .received(path)
        .into_iter()
        .filter_map(|r| {
            let body: Value = serde_json::from_str(&r.body).ok()?;
            (body["data"]["id"] == resource).then_some((body, r))
        })
        .collect()
}

/// How many customer events `resource` has.
fn written(w: &Worker, resource: &str) -> usize {
    let n = w.count(&format!("SELECT COUNT(*) AS n FROM outbound_events WHERE resource_id = {}", lit(resource)));
    usize::try_from(n).unwrap_or(0)
}

/// Whether `resource`'s `events` events were each answered 2xx at `path`.
fn all_delivered(w: &Worker, path: &str, resource: &str, events: usize) -> bool {
    let ok: std::collections::BTreeSet<String> = about(w, path, resource)
        .into_iter()
        .filter(|(_, r)| (200..300).contains(&r.answered))
        .filter_map(|(b, _)| b["id"].as_str().map(str::to_owned))
        .collect();
    ok.len() == events
}

/// How many deliveries of `resource`'s `event_type` events to `endpoint_id` are in `status`.
fn deliveries(w: &Worker, endpoint_id: &str, resource: &str, event_type: &str, status: &str) -> i64 {
    w.count(&format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
         WHERE o.resource_id = {} AND o.type = {} AND d.status = {} AND d.endpoint_id = {}",
        lit(resource),
        lit(event_type),
        lit(status),
        lit(endpoint_id)
    ))
}

/// Whether `resource`'s `events` events were all written and recorded delivered to `endpoint_id`
/// by the platform. The number comes from the story: a receipt is processed after the carrier's
/// request is answered, so counting the events written would miss one not written yet.
fn recorded_delivered(w: &Worker, endpoint_id: &str, resource: &str, events: usize) -> bool {
    let succeeded = w.count(&format!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
         WHERE o.resource_id = {} AND d.endpoint_id = {} AND d.status = 'succeeded'",
        lit(resource),
        lit(endpoint_id)
    ));
    written(w, resource) == events && usize::try_from(succeeded).ok() == Some(events)
}

/// One attempt as the platform recorded it: the event's sequence, the attempt's number, when it
/// started and how long it took (milliseconds), the status it saw (`None`: no answer, for
/// whatever reason: its time ran out, or the connection failed), its error and the signature it
/// was sent with.
struct Recorded {
    sequence: i64,
    attempt: i64,
    at: i64,
    latency: i64,
    status: Option<u16>,
    error: Option<String>,
    signature: String,
}

/// Every attempt of `resource`'s events at `endpoint_id`, in attempt order.
fn recorded(w: &Worker, endpoint_id: &str, resource: &str) -> Vec<Recorded> {
    w.sql(&format!(
        "SELECT o.sequence, a.attempt, a.attempted_at, a.latency_ms, a.status_code, a.error, a.request_signature
         FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
         JOIN outbound_events o ON o.id = d.event_id
         WHERE o.resource_id = {} AND d.endpoint_id = {} ORDER BY o.sequence, a.attempt",
        lit(resource),
        lit(endpoint_id)
    ))
    .iter()
    .map(|r| Recorded {
        sequence: r["sequence"].as_i64().unwrap_or(-1),
        attempt: r["attempt"].as_i64().unwrap_or(-1),
        at: r["attempted_at"].as_i64().unwrap_or(-1),
        latency: r["latency_ms"].as_i64().unwrap_or(-1),
        status: r["status_code"].as_u64().and_then(|s| u16::try_from(s).ok()),
        error: r["error"].as_str().map(str::to_owned),
        signature: r["request_signature"].as_str().unwrap_or_default().to_owned(),
    })
    .collect()
}

/// `resource`'s requests at `path` (endpoint `endpoint_id`'s URL), in arrival order, each held
/// to the attempt the platform recorded (matched by the signature it was sent with; panics on a
/// request that is no recorded attempt, or answered otherwise than recorded), with every
/// recorded attempt; the index is the request's record.
fn held_to_records(w: &Worker, endpoint_id: &str, path: &str, resource: &str) -> Held {
    let got = about(w, path, resource);
    let records = recorded(w, endpoint_id, resource);
    let log: Vec<(i64, u16, i64)> =
        got.iter().map(|(b, r)| (b["sequence"].as_i64().unwrap_or(-1), r.answered, r.received_at)).collect();
    let shown: Vec<_> = records.iter().map(|r| (r.sequence, r.attempt, r.at, r.latency, r.status, &r.error)).collect();
    let context = format!(
        "received (sequence, answered, at): {log:?}; \
         recorded (sequence, attempt, at ms, latency ms, status, error): {shown:?}"
    );
    let mut used = vec![false; records.len()];
    let mut requests = Vec::new();
    for (body, request) in got {
        let sequence = body["sequence"].as_i64().unwrap_or(-1);
        let signature = request.header("webhook-signature").unwrap_or_default();
        let record = records
            .iter()
            .enumerate()
            .position(|(i, r)| !used[i] && r.sequence == sequence && r.signature == signature);
        let Some(i) = record else { panic!("{resource}: a request the platform has no attempt for: {context}") };
        used[i] = true;
        if let Some(status) = records[i].status {
            assert_eq!(request.answered, status, "{resource}: recorded as answered: {context}");
        }
        requests.push((body, request, i));
    }
    let unseen = records.iter().zip(&used).filter(|(r, used)| !**used && r.status.is_some()).count();
    assert_eq!(unseen, 0, "{resource}: every answered attempt was received: {context}");
    Held { requests, records, context }
}

/// What [`held_to_records`] found.
struct Held {
    requests: Vec<(Value, Received, usize)>,
    records: Vec<Recorded>,
    /// The requests and the records, for an assertion's message.
    context: String,
}

impl Held {
    /// The requests whose answer the platform saw (one whose answer was lost on its way back, a
    /// 2xx that came after the attempt's time ran out, say, is rightly sent again).
    fn answered(&self) -> impl Iterator<Item = &(Value, Received, usize)> {
        self.requests.iter().filter(|(_, _, i)| self.records[*i].status.is_some())
    }
}

/// Asserts the ordered endpoint `endpoint_id` at `path` received `resource`'s events one at a
/// time in `sequence` order, holding each request to the attempt the platform recorded
/// ([`held_to_records`]):
/// - every request is for the event after the last one recorded delivered (none before, and
///   none again once recorded delivered), and every attempt of an event started after the
///   earlier event's success ended, by the platform's clock;
/// - each of its `events` events is recorded delivered once, the sequences 1, 2, ... with none
///   missing;
/// - a request is recorded with the status it was answered, or as no answer: a 2xx that did not
///   reach the worker (its time ran out first) is a lost answer, and the event is rightly sent
///   again under its webhook-id.
fn in_sequence(w: &Worker, endpoint_id: &str, path: &str, resource: &str, events: usize) {
    let Held { requests, records, context } = held_to_records(w, endpoint_id, path, resource);
    let mut delivered = 0;
    for (body, _, i) in &requests {
        let sequence = body["sequence"].as_i64().unwrap_or(-1);
        assert_eq!(sequence, delivered + 1, "{resource}: only the event after the last delivered goes: {context}");
        if records[*i].status.is_some_and(|s| (200..300).contains(&s)) {
            delivered = sequence;
        }
    }
    let expected = i64::try_from(events).unwrap_or(0);
    assert_eq!(delivered, expected, "{resource}: every event delivered: {context}");
    let successes = |sequence: i64| {
        records.iter().filter(move |r| r.sequence == sequence && r.status.is_some_and(|s| (200..300).contains(&s)))
    };
    for sequence in 1..=expected {
        assert_eq!(successes(sequence).count(), 1, "{resource}: event {sequence} recorded delivered once: {context}");
    }
    for later in records.iter().filter(|r| r.sequence > 1) {
        let ended = successes(later.sequence - 1).map(|r| r.at + r.latency).min().unwrap_or(i64::MAX);
        assert!(
            later.at >= ended,
            "{resource}: attempt {} of event {} started before event {} was delivered: {context}",
            later.attempt,
            later.sequence,
            later.sequence - 1
        );
    }
}

/// Two outbound messages, their receipts in each order (sent then delivered, delivered then
/// sent), each receipt twice and re-signed, and four calls: one answered and hung up, one that
/// nobody answered, one whose legs' hangups all came (twice, last leg first) before its
/// `call.initiated`, and one whose caller hung up before the carrier's retried `call.initiated`
/// (twice, once re-signed): an ordered endpoint that flaps (each event answered 500 once or twice before
/// 200, so every event is retried and a later one would overtake it if order were not kept; its
/// circuit free to open) receives each resource's events in sequence, one at a time, each
/// recorded delivered once, beside a hung endpoint of the same account subscribed to the same
/// events. An unordered endpoint of the account receives them all too. An event comes again
/// after a 2xx only when that answer was lost on its way back ([`in_sequence`] matches every
/// request to the attempt the platform recorded). (A flap by the clock, 1.5 s of 500s and 1.5 s
/// of 200s, could exhaust an event: a circuit's probes came every 9 s at its longest opening, a
/// whole number of the flap's cycles, each into the 500s.)
fn each_resources_events_arrive_in_sequence_whatever_the_carriers_order(w: &Worker) {
    let c = customer(w);
    let types: Vec<&str> = MESSAGE_TYPES.iter().chain(&CALL_TYPES).copied().collect();
    let ordered = format!("/hook/ordered-{}", sim::random_hex());
    let hung = format!("/hook/hung-{}", sim::random_hex());
    let plain = format!("/hook/plain-{}", sim::random_hex());
    w.customer.refuse_each_event_at_first(&ordered);
    w.customer.hang(&hung);
    let ordered_id = endpoint(w, &c, &ordered, &types, json!({"ordering": "resource"}));
    endpoint(w, &c, &hung, &types, json!({"ordering": "resource"}));
    endpoint(w, &c, &plain, &types, json!({}));

    let mut resources = Vec::new();
    for order in [["sent", "delivered"], ["delivered", "sent"]] {
        let (id, carrier_id) = sent(w, &c, &format!("ordered {}", order.join(" then ")));
        receipts(w, &carrier_id, &order);
        w.wait_status(&c, &id, "delivered");
        // Each resource with the number of events its story writes: a message sent and delivered.
        resources.push((id, 2));
    }
    let answered = ring_on(w, c.key.clone(), &c.number);
    answered_then_hung_up(w, &answered);
    // Initiated, answered and completed.
    resources.push((answered.call_id.clone(), 3));
    // A second number of the account: a ring is found by the first dial from its number.
    let second = fresh_number();
    w.create_number(&c.account, &second, &TARGETS);
    let missed = ring_on(w, c.key.clone(), &second);
    nobody_answers(w, &missed);
    // Initiated and missed, as each call below.
    resources.push((missed.call_id.clone(), 2));
    // Calls whose events came in the orders a carrier's retries make: every leg's hangup (each
    // twice) before the call's first event, and a caller who hung up before the carrier's
    // retried `call.initiated` (twice, once re-signed).
    let reversed = inbound_to(&c.key, &c.number);
    legs_hung_up_in_reverse_before_initiated(w, &reversed);
    resources.push((reversed.call_id.clone(), 2));
    let left = inbound_to(&c.key, &c.number);
    caller_hangup_before_a_retried_initiated(w, &left);
    resources.push((left.call_id.clone(), 2));

    for (resource, events) in &resources {
        let done = w.eventually(Duration::from_secs(120), || recorded_delivered(w, &ordered_id, resource, *events));
        let rows = || {
            w.sql(&format!(
                "SELECT o.type, o.sequence, d.status, d.attempts, d.waiting FROM webhook_deliveries d
                 JOIN outbound_events o ON o.id = d.event_id WHERE o.resource_id = {} AND d.endpoint_id = {}
                 ORDER BY o.sequence",
                lit(resource),
                lit(&ordered_id)
            ))
        };
        let log: Vec<(i64, u16, i64)> = about(w, &ordered, resource)
            .iter()
            .map(|(b, r)| (b["sequence"].as_i64().unwrap_or(-1), r.answered, r.received_at))
            .collect();
        assert!(
            done,
            "{resource}: {} of {events} events written, every one recorded delivered at the ordered endpoint: {log:?}, {:?}",
            written(w, resource),
            rows()
        );
        in_sequence(w, &ordered_id, &ordered, resource, *events);
        let unordered = w.eventually(Duration::from_secs(60), || all_delivered(w, &plain, resource, *events));
        assert!(unordered, "{resource} (unordered)");
    }
    // And no event written since.
    let counts: Vec<(&String, usize)> =
        resources.iter().map(|(resource, _)| (resource, written(w, resource))).collect();
    let expected: Vec<(&String, usize)> = resources.iter().map(|(resource, events)| (resource, *events)).collect();
    assert_eq!(counts, expected, "events written");
    w.customer.let_go(&hung);
    // Ordering off again: what waited (nothing now) goes back into the line, and it shows.
    let path = format!("/v1/webhook_endpoints/{ordered_id}");
    let off = w.call("PATCH", &path, &c.key, Some(&json!({"ordering": "none"})), &[]);
    assert_eq!((off.status, off.json()["ordering"].as_str()), (200, Some("none")), "{}", off.body);
}

/// Two ordered endpoints that refuse one message's `message.sent` (every attempt, without a
/// circuit breaker to stretch the retries): at the `skip` endpoint it is exhausted and the
/// message's `message.delivered` follows, naming it in `exactly-skipped`; at the `hold` endpoint
/// the message's later event waits (`held_count`) while another message's events arrive in
/// order; a replay of the held event waits behind it too, and once the refused event is retried
/// from the delivery log and delivered, both copies of the held one follow it, naming nothing.
/// A bad `ordering` or `on_exhausted` is refused naming it.
fn an_exhausted_event_is_skipped_and_named_or_holds_its_resource_alone(w: &Worker) {
    let c = customer(w);
    let types = ["message.sent", "message.delivered"];
    let skip = format!("/hook/skip-no-breaker-{}", sim::random_hex());
    let hold = format!("/hook/hold-no-breaker-{}", sim::random_hex());
    let refused = format!("refused {}", sim::random_hex());
    for path in [&skip, &hold] {
        w.customer.refuse_bodies_with(path, &[&refused, "\"type\":\"message.sent\""]);
    }
    let skipping = endpoint(w, &c, &skip, &types, json!({"ordering": "resource"}));
    let holding = endpoint(w, &c, &hold, &types, json!({"ordering": "resource", "on_exhausted": "hold"}));
    for (change, field) in [(json!({"ordering": "sorted"}), "ordering"), (json!({"on_exhausted": 1}), "on_exhausted")] {
        let a = w.call("PATCH", &format!("/v1/webhook_endpoints/{holding}"), &c.key, Some(&change), &[]);
        assert_eq!((a.status, a.json()["error"]["field"].as_str()), (422, Some(field)), "{}", a.body);
    }

    let (a, carrier_a) = sent(w, &c, &refused);
    receipts(w, &carrier_a, &["delivered"]);
    w.wait_status(&c, &a, "delivered");
    let deliveries_of =
        |endpoint: &str, event_type: &str, status: &str| deliveries(w, endpoint, &a, event_type, status);

    // Skip: exhausted, then the next event goes and names it.
    let skipped = w.eventually(Duration::from_secs(120), || {
        deliveries_of(&skipping, "message.sent", "failed") == 1
            && deliveries_of(&skipping, "message.delivered", "succeeded") == 1
    });
    assert!(skipped, "skipped at {skip}");
    let skipped_event = w
        .sql(&format!("SELECT id FROM outbound_events WHERE resource_id = {} AND type = 'message.sent'", lit(&a)))[0]
        ["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let held = held_to_records(w, &skipping, &skip, &a);
    let got: Vec<(&Value, &Received)> = held.requests.iter().map(|(b, r, _)| (b, r)).collect();
    let next: Vec<&Received> =
        held.answered().filter(|(b, ..)| b["type"] == "message.delivered").map(|(_, r, _)| r).collect();
    assert_eq!(next.len(), 1, "message.delivered went once, its answer seen: {}", held.context);
    assert_eq!(next[0].header("exactly-skipped"), Some(skipped_event.as_str()), "it names the skipped event");
    let refusals = got.iter().filter(|(b, _)| b["type"] == "message.sent").count();
    assert_eq!(refusals, 8, "message.sent was tried 8 times before it was skipped");
    assert_eq!(
        got.iter().position(|(b, _)| b["type"] == "message.delivered"),
        Some(refusals),
        "nothing of the resource before its last refusal: {}",
        held.context
    );

    // Hold: the later event waits, alone. The exhaustion's settling puts it back into the line
    // (`waiting = 1`) and its claim parks it again (`waiting = 2`): wait for the claim.
    assert!(w.eventually(Duration::from_secs(120), || deliveries_of(&holding, "message.sent", "failed") == 1));
    let waiting_of_later = || {
        w.sql(&format!(
            "SELECT d.waiting, d.status FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
             WHERE o.resource_id = {} AND o.type = 'message.delivered' AND d.endpoint_id = {}",
            lit(&a),
            lit(&holding)
        ))
    };
    let parked = w
        .eventually(Duration::from_secs(60), || waiting_of_later() == vec![json!({"waiting": 2, "status": "pending"})]);
    assert!(parked, "message.delivered waits for the exhausted one: {:?}", waiting_of_later());
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{holding}"), &c.key, None, &[]).json();
    assert!(shown["held_count"].as_u64() >= Some(1), "{shown}");
    let (b, carrier_b) = sent(w, &c, &format!("another {}", sim::random_hex()));
    receipts(w, &carrier_b, &["delivered"]);
    // Its two events: `message.sent`, and `message.delivered` once the receipt is processed.
    let another = w.eventually(Duration::from_secs(120), || recorded_delivered(w, &holding, &b, 2));
    assert!(another, "another message goes");
    in_sequence(w, &holding, &hold, &b, 2);
    assert!(about(w, &hold, &a).iter().all(|(b, _)| b["type"] == "message.sent"), "still held");
    // The held event replayed: a second delivery of it, which waits behind the exhausted one too.
    let held_event = w
        .sql(&format!("SELECT id FROM outbound_events WHERE resource_id = {} AND type = 'message.delivered'", lit(&a)))
        [0]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let replay =
        w.call("POST", &format!("/v1/events/{held_event}/replay"), &c.key, Some(&json!({"endpoint_id": holding})), &[]);
    assert_eq!(replay.status, 202, "{}", replay.body);
    let both_wait = w.eventually(Duration::from_secs(60), || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE event_id = {} AND waiting = 2 AND status = 'pending'",
            lit(&held_event)
        )) == 2
    });
    assert!(both_wait, "the replay waits behind the exhausted event too");

    // Retried and delivered: both copies of the held event follow it, naming nothing.
    w.customer.accept_all(&hold);
    let retry = w.call(
        "POST",
        &format!("/v1/webhook_endpoints/{holding}/retries"),
        &c.key,
        Some(&json!({"resource_id": a})),
        &[],
    );
    assert_eq!(retry.status, 202, "{}", retry.body);
    let released = w.eventually(Duration::from_secs(120), || {
        deliveries_of(&holding, "message.sent", "succeeded") == 1
            && deliveries_of(&holding, "message.delivered", "succeeded") == 2
    });
    assert!(released, "released at {hold}: {:?}", about(w, &hold, &a).len());
    // The requests whose answer the platform saw: one whose answer was lost is rightly sent again.
    let held = held_to_records(w, &holding, &hold, &a);
    let log: Vec<(String, u16, Option<String>)> = held
        .answered()
        .map(|(b, r, _)| {
            (
                b["type"].as_str().unwrap_or_default().to_owned(),
                r.answered,
                r.header("exactly-skipped").map(str::to_owned),
            )
        })
        .collect();
    let first_success = log.iter().position(|(t, status, _)| t == "message.sent" && *status == 200);
    let first_later = log.iter().position(|(t, ..)| t == "message.delivered");
    assert!(first_success.is_some() && first_later > first_success, "the held event after the exhausted one: {log:?}");
    let later: Vec<_> = log.iter().filter(|(t, ..)| t == "message.delivered").collect();
    let named_nothing = later.iter().all(|(_, s, skipped)| *s == 200 && skipped.is_none());
    assert!(later.len() == 2 && named_nothing, "{log:?}; {}", held.context);
}

/// An ordered endpoint whose first answer to a message's `message.sent` asks for a retry in 30 s:
/// the message's `message.delivered` waits behind it. A filter that holds `message.sent` back,
/// set meanwhile, settles it when its retry's job comes, and that settling hands the resource on
/// at once: `message.delivered` goes then, not when a cron's sweep finds the line. (No cron runs
/// unless a test fires one: alone, this test fails without the hand-on; beside others, a cron
/// fired by another test within its 20 s could pass it.)
fn an_event_its_filter_holds_back_hands_its_resource_on_at_once(w: &Worker) {
    let c = customer(w);
    let path = format!("/hook/filtered-later-{}", sim::random_hex());
    w.customer.always_with(&path, 503, &[("retry-after", "30")]);
    let id = endpoint(w, &c, &path, &["message.sent", "message.delivered"], json!({"ordering": "resource"}));
    let (a, carrier_a) = sent(w, &c, &format!("filtered {}", sim::random_hex()));
    let asked_again = w.eventually(Duration::from_secs(60), || about(w, &path, &a).len() == 1);
    assert!(asked_again, "message.sent was tried once and refused");
    receipts(w, &carrier_a, &["delivered"]);
    w.wait_status(&c, &a, "delivered");
    let parked = || {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
             WHERE o.resource_id = {} AND o.type = 'message.delivered' AND d.endpoint_id = {}
               AND d.waiting = 2 AND d.status = 'pending'",
            lit(&a),
            lit(&id)
        )) == 1
    };
    assert!(w.eventually(Duration::from_secs(60), parked), "message.delivered waits behind message.sent");

    // The filter first, then the 200s: a retry that comes before the filter is refused again
    // (and retried), never delivered.
    let patch = json!({"filter": "type != \"message.sent\""});
    let a_patch = w.call("PATCH", &format!("/v1/webhook_endpoints/{id}"), &c.key, Some(&patch), &[]);
    assert_eq!(a_patch.status, 200, "{}", a_patch.body);
    w.customer.always(&path, 200);
    let settled = |event_type: &str, status: &str| deliveries(w, &id, &a, event_type, status) == 1;
    // The retry comes 30 s after the refusal (60 s after a second one); then the next event goes
    // at once.
    assert!(
        w.eventually(Duration::from_secs(120), || settled("message.sent", "filtered")),
        "message.sent held back by the filter"
    );
    let delivered = w.eventually(Duration::from_secs(20), || settled("message.delivered", "succeeded"));
    assert!(delivered, "message.delivered went once message.sent was held back: {:?}", about(w, &path, &a).len());
    // The requests whose answer the platform saw: one whose answer was lost is rightly sent again.
    let held = held_to_records(w, &id, &path, &a);
    let got: Vec<(String, u16)> =
        held.answered().map(|(b, r, _)| (b["type"].as_str().unwrap_or_default().to_owned(), r.answered)).collect();
    let (first, rest) = got.split_at(got.iter().position(|(t, _)| t == "message.delivered").unwrap_or(got.len()));
    assert!(
        !first.is_empty() && first.iter().all(|(t, status)| t == "message.sent" && *status == 503),
        "message.sent only refused, before message.delivered: {got:?}"
    );
    assert_eq!(rest, [("message.delivered".to_owned(), 200)], "then message.delivered, once: {}", held.context);
}

/// Resources held at an ordered endpoint for the test below: each message's `message.sent` is
/// refused, to be retried in an hour, so its `message.delivered` waits behind it.
const HELD: usize = 150;

/// An ordered endpoint that answers everything but `message.sent` (its circuit closed, healthy
/// inbound traffic beside it) holds [`HELD`] messages' `message.delivered` behind their refused
/// `message.sent`. A fresh inbound message's `message.received` goes at once, before the cron's
/// look at deliveries that waited long and after it: a look finds every held one still behind
/// and leaves it out of the line, where it would stand ahead of the fresh one (a claim refuses a
/// delivery while an older one is in line), and nothing held is sent.
fn held_resources_never_stand_in_line_ahead_of_a_fresh_one(w: &Worker) {
    let c = customer(w);
    let path = format!("/hook/held-many-no-breaker-{}", sim::random_hex());
    // Every refusal asks for its retry in an hour: the held stay held for the whole test.
    w.customer.always_with(&path, 200, &[("retry-after", "3600")]);
    w.customer.refuse_bodies_with(&path, &["\"type\":\"message.sent\""]);
    let types = ["message.sent", "message.delivered", "message.received"];
    let id = endpoint(w, &c, &path, &types, json!({"ordering": "resource"}));
    let inbound = |text: &str| {
        let event_id = format!("held-in-{}", sim::random_hex());
        let body = exactly_tests::telnyx_inbound(&event_id, &format!("msg-{event_id}"), &c.number, text);
        assert_eq!(w.deliver_telnyx(&body).status, 200);
    };
    let mut messages = Vec::new();
    for i in 0..HELD {
        let key = format!("key-{}", sim::random_hex());
        let body = json!({"from": c.number, "to": "+15559990000", "text": format!("held {i}")});
        let a = w.call("POST", "/v1/messages", &c.key, Some(&body), &[("idempotency-key", key.as_str())]);
        assert_eq!(a.status, 201, "{}", a.body);
        messages.push(a.json()["id"].as_str().expect("an id").to_owned());
        // Successes between the refusals: the endpoint's failure streak never reaches the 100
        // that disable it.
        if i % 5 == 0 {
            inbound(&format!("between {i}"));
        }
    }
    let of_endpoint = |clause: &str| {
        w.count(&format!(
            "SELECT COUNT(*) AS n FROM webhook_deliveries d JOIN outbound_events o ON o.id = d.event_id
             WHERE d.endpoint_id = {} AND {clause}",
            lit(&id)
        ))
    };
    let refused = || of_endpoint("o.type = 'message.sent' AND d.status = 'pending' AND d.attempts = 1");
    let all_refused = w.eventually(Duration::from_secs(180), || usize::try_from(refused()).ok() == Some(HELD));
    assert!(all_refused, "each message.sent refused once: {} of {HELD}", refused());
    for message in &messages {
        let carrier_id = w.message(&c, message)["carrier_message_id"].as_str().unwrap_or_default().to_owned();
        assert!(!carrier_id.is_empty(), "{message} was handed to the carrier");
        let event_id = format!("r-{}", sim::random_hex());
        assert_eq!(w.deliver_telnyx(&sim::telnyx::receipt(&event_id, &carrier_id, "delivered", json!([]))).status, 200);
    }
    let held = || of_endpoint("o.type = 'message.delivered' AND d.status = 'pending' AND d.waiting = 2");
    let all_held = w.eventually(Duration::from_secs(180), || usize::try_from(held()).ok() == Some(HELD));
    assert!(all_held, "each message.delivered waits behind its message.sent: {} of {HELD}", held());

    // A fresh resource's event goes at once, and nothing held went.
    let fresh_goes = |text: &str| {
        inbound(text);
        let received =
            || w.customer.received(&path).iter().any(|r| r.body.contains(text) && (200..300).contains(&r.answered));
        let went = w.eventually(Duration::from_secs(60), received);
        let state = || (of_endpoint("d.waiting = 1 AND d.status = 'pending'"), held());
        assert!(went, "{text}: its message.received went; (in line, held): {:?}", state());
    };
    fresh_goes(&format!("fresh before {}", sim::random_hex()));
    // Every held one waited past the cron's look at long waits (two minutes).
    let aged = w.sql(&format!(
        "UPDATE webhook_deliveries SET updated_at = updated_at - 180000
         WHERE endpoint_id = {} AND waiting = 2 AND status = 'pending'",
        lit(&id)
    ));
    assert!(aged.is_empty(), "{aged:?}");
    assert_eq!(w.cron().status, 200);
    fresh_goes(&format!("fresh after {}", sim::random_hex()));
    assert_eq!(of_endpoint("d.waiting = 1 AND d.status = 'pending'"), 0, "the look put nothing held into the line");
    assert_eq!(usize::try_from(held()).ok(), Some(HELD), "each still waits");
    let shown = w.call("GET", &format!("/v1/webhook_endpoints/{id}"), &c.key, None, &[]).json();
    assert_eq!((shown["enabled"].as_bool(), shown["held_count"].as_u64()), (Some(true), Some(HELD as u64)), "{shown}");
    let sent_held =
        w.customer.received(&path).iter().filter(|r| r.body.contains("\"type\":\"message.delivered\"")).count();
    assert_eq!(sent_held, 0, "nothing held was sent");
}
