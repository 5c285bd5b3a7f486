//! `/admin/metrics` and `/admin/metrics/series`: what operators watch.

use crate::api::auth::Ctx;
use exactly_core::Timestamp;
use serde_json::json;
use worker::{Request, Response};

use crate::api::auth;
use crate::api::http;
use crate::error::EdgeError;
use crate::platform::now;

/// `GET /admin/metrics`: the Prometheus text format (version 0.0.4) of what operators watch:
/// carrier events ingested, pending, parked and failed; customer deliveries created, pending
/// and failed; and the age of the oldest pending event and delivery.
pub async fn metrics(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let f = crate::store::metrics::figures(env, ctx.config).await?;
    let at = now().unix_millis();
    let age = |oldest: Option<Timestamp>| seconds(oldest.map_or(0, |t| at - t.unix_millis()));
    let ingested = f.events_ingested.unwrap_or(0);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, String)]| {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (labels, value) in samples {
            out.push_str(&format!("{name}{labels} {value}\n"));
        }
    };
    metric(
        "exactly_carrier_events_ingested_total",
        "counter",
        "Carrier events stored (first deliveries).",
        &[("", count(ingested))],
    );
    metric(
        "exactly_carrier_events",
        "gauge",
        "Carrier events by state (processed: stored and neither pending nor failed).",
        &[
            ("{state=\"pending\"}", count(f.events_pending)),
            ("{state=\"parked\"}", count(f.events_parked)),
            ("{state=\"failed\"}", count(f.events_failed)),
            ("{state=\"processed\"}", count(ingested - f.events_pending - f.events_failed)),
        ],
    );
    metric(
        "exactly_webhook_deliveries",
        "gauge",
        "Customer webhook deliveries by outcome (succeeded: created and neither pending nor failed).",
        &[
            ("{outcome=\"pending\"}", count(f.deliveries_pending)),
            ("{outcome=\"failed\"}", count(f.deliveries_failed)),
            (
                "{outcome=\"succeeded\"}",
                count(f.deliveries_created.unwrap_or(0) - f.deliveries_pending - f.deliveries_failed),
            ),
        ],
    );
    metric(
        "exactly_oldest_pending_event_age_seconds",
        "gauge",
        "Age of the oldest carrier event neither processed nor failed.",
        &[("", age(f.oldest_pending_event))],
    );
    metric(
        "exactly_oldest_pending_delivery_age_seconds",
        "gauge",
        "How long the most overdue pending delivery has been due (0 when none is due).",
        &[("", age(f.oldest_pending_delivery))],
    );
    metric(
        "exactly_audit_rows_checked_total",
        "counter",
        "Rows the running audit has checked against the product's promises.",
        &[("", count(f.audit_checked))],
    );
    metric(
        "exactly_audit_violations_total",
        "counter",
        "Violations the running audit has found (each also raised audit.violation).",
        &[("", count(f.audit_found))],
    );
    metric(
        "exactly_isolate_wasm_memory_bytes",
        "gauge",
        "Linear memory of the wasm instance of the isolate that answered; it never shrinks, so steady growth under steady load is a leak.",
        &[("", crate::quotas::wasm_memory_bytes().to_string())],
    );
    let mut response = Response::ok(out).map_err(|e| EdgeError::platform("respond", e))?;
    response
        .headers_mut()
        .set("content-type", "text/plain; version=0.0.4")
        .map_err(|e| EdgeError::platform("header", e))?;
    Ok(response)
}

/// A count as the text format writes it: never below zero.
fn count(value: i64) -> String {
    value.max(0).to_string()
}

/// An age in milliseconds as seconds, to the millisecond and without trailing zeros (`12`,
/// `1.5`, `0.001`): the shortest text of the number, written without a float formatter.
fn seconds(millis: i64) -> String {
    let millis = millis.max(0);
    let text = format!("{}.{:03}", millis / 1000, millis % 1000);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// `GET /admin/metrics/series?hours=&bucket_minutes=`: what the operator's charts draw, as JSON
/// (the Prometheus text at `/admin/metrics` stays for scrapers): per bucket, attempts by outcome,
/// the success rate, time-to-webhook of first attempts, and the backlog at the bucket's end.
pub async fn metrics_series(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    let env = ctx.env;
    auth::admin(&req, ctx.config)?;
    let params = http::query(&req);
    let number = |name: &'static str, default: i64, max: i64| -> Result<i64, EdgeError> {
        match http::given(&params, name) {
            None => Ok(default),
            Some(text) => text
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| EdgeError::invalid(name, format!("must be an integer from 1 to {max}"))),
        }
    };
    let hours = number("hours", 24, 168)?;
    let minutes = number("bucket_minutes", 60, 1440)?;
    let buckets = hours * 60 / minutes;
    if !(1..=288).contains(&buckets) {
        return Err(EdgeError::invalid("bucket_minutes", "must make 1 to 288 buckets of the hours asked"));
    }
    let width = minutes * 60_000;
    // Buckets end at the next whole bucket, so a chart asked twice draws the same edges.
    let to = (now().unix_millis() / width + 1) * width;
    let series = crate::store::metrics::series(env, ctx.config, to, width, buckets).await?;
    let at = |ms: i64| Timestamp::from_unix_millis(ms).to_rfc3339();
    let data: Vec<serde_json::Value> = series
        .iter()
        .map(|b| {
            let answered = b.attempts;
            json!({
                "start": at(b.start), "attempts": b.attempts, "succeeded": b.succeeded, "refused": b.refused,
                "no_answer": b.no_answer,
                "success_rate": (answered > 0).then(|| b.succeeded as f64 / answered as f64),
                "time_to_webhook_ms_avg": (b.first_attempts > 0).then(|| b.time_to_webhook_ms_sum / b.first_attempts),
                "time_to_webhook_ms_max": (b.first_attempts > 0).then_some(b.time_to_webhook_ms_max),
                "backlog": b.backlog,
            })
        })
        .collect();
    http::json(
        200,
        &json!({ "from": at(to - width * buckets), "to": at(to), "bucket_seconds": width / 1000, "data": data }),
    )
}

#[cfg(test)]
mod tests {
    use super::{count, seconds};

    /// The samples read exactly as the float's own shortest text would.
    #[test]
    fn samples_read_as_their_numbers() {
        let mut millis: Vec<i64> = (0..5_000).collect();
        millis.extend([9_999, 10_000, 10_010, 59_999, 86_400_000, 1_790_000_000_123, 4_102_444_800_000]);
        for ms in millis {
            assert_eq!(seconds(ms), format!("{}", ms as f64 / 1000.0), "{ms} ms");
        }
        assert_eq!(seconds(-5), "0");
        for n in [0_i64, 1, 42, 1_000_000, 9_007_199_254_740_991] {
            assert_eq!(count(n), format!("{}", n as f64));
        }
        assert_eq!(count(-3), "0");
    }
}
