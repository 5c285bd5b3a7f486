//! The running audit (docs/contract.md, "The running audit"): violations planted beneath the
//! API, one of each of the four checks' kind, are each reported once, to `GET /admin/audit`, the metrics and
//! the operator's endpoint, and a later tick that reads the same rows reports nothing more; a
//! fault that breaks every row is reported at most 20 violations a check a tick. The chaos run's
//! worker reports none (chaos.rs).

use std::time::Duration;

use exactly_tests::{lit, Worker, ADMIN_TOKEN, OPERATOR_PATH};
use serde_json::Value;

use crate::TestFn;

pub const TESTS: &[(&str, TestFn)] =
    &[("audit::planted_violations_are_each_reported_once", planted_violations_are_each_reported_once)];

fn audit(w: &Worker) -> Value {
    let a = w.call("GET", "/admin/audit", ADMIN_TOKEN, None, &[]);
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()
}

fn checked(report: &Value) -> u64 {
    let databases = report["databases"].as_array().cloned().unwrap_or_default();
    let checks = databases.iter().flat_map(|d| d["checks"].as_array().cloned().unwrap_or_default());
    checks.map(|c| c["checked"].as_u64().unwrap_or(0)).sum()
}

/// The `audit.violation` bodies the operator's endpoint received, by event id.
fn signals(w: &Worker) -> std::collections::BTreeMap<String, Value> {
    w.customer
        .received(OPERATOR_PATH)
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter(|v| v["type"] == "audit.violation")
        .map(|v| (v["id"].as_str().unwrap_or_default().to_owned(), v))
        .collect()
}

fn planted_violations_are_each_reported_once(_shared: &Worker) {
    let mut w = Worker::start();
    let c = w.new_customer("audited");
    let (endpoint, _) = w.endpoint_at(&c, "/audited", &["message.received"]);
    let event_id = format!("audited-{}", sim::random_hex());
    let body = exactly_tests::telnyx_inbound(&event_id, &format!("msg-{event_id}"), &c.number, "audited");
    assert_eq!(w.deliver_telnyx(&body).status, 200);
    let delivered = w.eventually(Duration::from_secs(30), || {
        w.sql_for(
            &c.account,
            &format!(
                "SELECT COUNT(*) AS n FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
             WHERE d.endpoint_id = {} AND a.status_code = 200",
                lit(&endpoint)
            ),
        )[0]["n"]
            == 1
    });
    assert!(delivered, "the inbound message was delivered once");
    // What the product wrote keeps every promise.
    assert_eq!(w.cron().status, 200);
    let clean = audit(&w);
    assert_eq!(clean["found"], 0, "{clean}");
    assert!(checked(&clean) >= 1, "the delivery's attempt was checked: {clean}");
    assert!(signals(&w).is_empty());

    // Planted beneath the API: a move of the inbound message (it has none), a charge for it (it
    // was never sent), a second success of the delivery, and an event of the endpoint's type,
    // written two minutes after the endpoint, without its delivery.
    let sql = |q: String| w.sql_for(&c.account, &q);
    let message =
        sql(format!("SELECT id FROM messages WHERE carrier_message_id = {}", lit(&format!("msg-{event_id}"))));
    let message = message[0]["id"].as_str().expect("the inbound message").to_owned();
    let delivery = sql(format!("SELECT id FROM webhook_deliveries WHERE endpoint_id = {}", lit(&endpoint)));
    let delivery = delivery[0]["id"].as_str().expect("the delivery").to_owned();
    let (at, m, d, account) = (sim::unix_millis(), lit(&message), lit(&delivery), lit(&c.account));
    sql(format!("INSERT INTO message_status_history (message_id, status, created_at) VALUES ({m}, 'sent', {at})"));
    sql(format!(
        "INSERT INTO usage (account_id, kind, quantity, resource_id, created_at)
         VALUES ({account}, 'sms_segments', 3, {m}, {at})"
    ));
    sql(format!(
        "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms)
         VALUES ({d}, 2, {at}, {}, 200, 5)",
        at / 1000
    ));
    // (An attempt that got no answer at all, as a timeout records it, is read past.)
    sql(format!(
        "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms, error)
         VALUES ({d}, 3, {at}, {}, NULL, 10000, 'timed out')",
        at / 1000
    ));
    sql(format!("UPDATE webhook_endpoints SET created_at = created_at - 120000 WHERE id = {}", lit(&endpoint)));
    let lost = format!("evt_{}", sim::random_hex());
    sql(format!(
        "INSERT INTO outbound_events (id, account_id, type, resource_id, payload, sequence, created_at)
         VALUES ({}, {account}, 'message.received', {}, '{{}}', 1, {at})",
        lit(&lost),
        lit(&format!("audited-{lost}"))
    ));
    let row = |table: &str, filter: String| {
        let id = sql(format!("SELECT MAX(id) AS id FROM {table} WHERE {filter}"));
        format!("{table}:{}", id[0]["id"].as_i64().expect("a planted row"))
    };
    let planted = [
        ("status_order", row("message_status_history", format!("message_id = {m} AND status = 'sent'"))),
        ("charges", row("usage", format!("resource_id = {m}"))),
        ("one_success", row("webhook_attempts", format!("delivery_id = {d} AND status_code = 200"))),
        ("deliveries", format!("outbound_events:{lost}")),
    ];

    assert_eq!(w.cron().status, 200);
    let found = audit(&w);
    assert_eq!(found["found"], 4, "{found}");
    let violations = found["violations"].as_array().cloned().unwrap_or_default();
    for (check, row) in &planted {
        let named: Vec<&Value> =
            violations.iter().filter(|v| v["check"] == *check && v["rows"][0] == row.as_str()).collect();
        assert_eq!(named.len(), 1, "{check} names {row} once: {found}");
        assert!(named[0]["detail"].as_str().is_some_and(|d| !d.is_empty()), "{found}");
    }
    assert_eq!(violations.len(), 4, "nothing else was found: {found}");
    let missing = violations.iter().find(|v| v["check"] == "deliveries").map(|v| v["rows"][1].clone());
    assert_eq!(missing, Some(Value::from(format!("webhook_endpoints:{endpoint}"))), "{found}");
    let told = w.eventually(Duration::from_secs(30), || signals(&w).len() == 4);
    assert!(told, "each violation reached the operator: {:?}", signals(&w));
    for (check, row) in &planted {
        let about = signals(&w)
            .into_values()
            .filter(|v| v["data"]["check"] == *check && v["data"]["rows"][0] == row.as_str())
            .count();
        assert_eq!(about, 1, "one signal about {row}");
    }
    // Each body as docs/openapi.json's `webhooks` says an audit.violation is.
    let bodies: Vec<String> = signals(&w).values().map(Value::to_string).collect();
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    let problems: Vec<String> = exactly_tests::webhook_schema_problems(&bodies).into_iter().flatten().collect();
    assert!(problems.is_empty(), "audit.violation bodies that break the document: {problems:?}");
    let metrics = w.call("GET", "/admin/metrics", ADMIN_TOKEN, None, &[]);
    assert!(metrics.body.lines().any(|l| l == "exactly_audit_violations_total 4"), "{}", metrics.body);

    // Another tick reads past them: nothing is found or raised again, even with a check moved
    // back to read the same rows once more.
    sql("UPDATE audit_checks SET position = 0 WHERE name = 'status_order'".to_owned());
    assert_eq!(w.cron().status, 200);
    let again = audit(&w);
    assert_eq!(again["found"], 4, "{again}");
    let written = sql("SELECT COUNT(*) AS n FROM outbound_events WHERE type = 'audit.violation'".to_owned());
    assert_eq!(written[0]["n"], 4, "one signal per violation");

    // A fault that breaks every row: 50 charges for messages that do not exist. A tick raises
    // at most 20 of them (a check's bound is per tick, not per page), the next tick the next 20,
    // and the one after the last 10.
    let rows: Vec<String> = (0..50)
        .map(|i| {
            format!("({account}, 'sms_segments', 1, {}, {at})", lit(&format!("msg_missing_{i}_{}", sim::random_hex())))
        })
        .collect();
    sql(format!("INSERT INTO usage (account_id, kind, quantity, resource_id, created_at) VALUES {}", rows.join(", ")));
    for total in [24, 44, 54, 54] {
        assert_eq!(w.cron().status, 200);
        let report = audit(&w);
        assert_eq!(report["found"], total, "at most 20 violations of a check a tick: {report}");
    }
    let written = sql("SELECT COUNT(*) AS n FROM outbound_events WHERE type = 'audit.violation'".to_owned());
    assert_eq!(written[0]["n"], 54, "one signal per violation");
    w.stop();
}
