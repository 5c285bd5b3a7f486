//! Test-only routes of the end-to-end build (the `fault-injection` feature, which the
//! production build never enables): `POST /__e2e/sql` lets the tests count rows through the
//! worker's own D1 binding, `POST /__e2e/store/{check}` runs one store guard twice against
//! real D1 ([`crate::testing::checks`], [`crate::testing::circuit_checks`]), `POST /__e2e/jobs`
//! enqueues a job as a redelivered queue message would run it again, `POST
//! /__e2e/calls/{call_id}` counts what a call's Durable Object still stores, `POST /__e2e/quotas`
//! reports the highest value each of Cloudflare's limits has seen (`crate::quotas`), and `POST
//! /__e2e/quotas/probe` runs a given number of D1 statements in one request, the guard's own test.

use worker::{Env, Request, Response};

use crate::error::EdgeError;

/// Routes `/__e2e/...` (the segments after `__e2e`).
pub async fn route(req: Request, env: &Env, segments: &[&str]) -> Result<Response, EdgeError> {
    crate::quotas::scaffolding();
    match segments {
        ["sql"] => sql(req, env).await,
        ["store", "deliveries.unclaim_probe"] => {
            store_check(crate::testing::circuit_checks::unclaim_probe(env, false)).await
        }
        ["store", "deliveries.unclaim_probe_token_taken"] => {
            store_check(crate::testing::circuit_checks::unclaim_probe(env, true)).await
        }
        ["store", check] => store_check(crate::testing::checks::run(env, check)).await,
        ["jobs"] => {
            let mut req = req;
            let job: crate::queues::Job = crate::api::http::json_body(&mut req).await?;
            crate::queues::enqueue(env, job).await?;
            crate::api::http::json(202, &serde_json::json!({"enqueued": 1}))
        }
        ["calls", call_id] => held(env, call_id).await,
        ["quotas"] => crate::api::http::json(200, &crate::quotas::highest()),
        ["quotas", "probe"] => probe(req, env).await,
        _ => Err(EdgeError::NoRoute),
    }
}

/// A store check's report, answered as JSON.
async fn store_check(
    check: impl std::future::Future<Output = Result<serde_json::Value, EdgeError>>,
) -> Result<Response, EdgeError> {
    crate::api::http::json(200, &check.await?)
}

/// `POST /__e2e/quotas/probe` `{"statements": n, "rows": r}` -> `{"ran": n, "longest_ms": ms}`:
/// runs n statements, one after another, in this one request, each counting to r (1 when absent)
/// in SQL, so a test can watch the guard let the thousandth D1 query of an invocation through and
/// refuse the next, and read the time of a statement as the guard reads it.
async fn probe(mut req: Request, env: &Env) -> Result<Response, EdgeError> {
    #[derive(serde::Deserialize)]
    struct Probe {
        statements: usize,
        #[serde(default)]
        rows: Option<i64>,
    }
    const COUNT: &str = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?1) \
                         SELECT count(*) AS n FROM c";
    let probe: Probe = crate::api::http::json_body(&mut req).await?;
    let db = crate::store::d1(env, crate::bindings::DB)?;
    let rows = crate::store::int(probe.rows.unwrap_or(1));
    for _ in 0..probe.statements {
        crate::store::query(crate::store::stmt(&db, COUNT, std::slice::from_ref(&rows))?).await?;
    }
    let longest = crate::quotas::longest_statement();
    crate::api::http::json(200, &serde_json::json!({ "ran": probe.statements, "longest_ms": longest }))
}

/// `POST /__e2e/calls/{call_id}` -> `{"rows": n}`: how many rows the call's Durable Object still
/// stores (its machine, its queued actions and what it keeps about them).
async fn held(env: &Env, call_id: &str) -> Result<Response, EdgeError> {
    let stub = crate::platform::call_stub(env, call_id)?;
    let headers = worker::Headers::new();
    headers.set(crate::bindings::HELD_HEADER, "1").map_err(|e| EdgeError::platform("header", e))?;
    let request = crate::platform::request("GET", "https://call.internal/", Some(&headers), None, true)
        .map_err(|e| EdgeError::platform("call request", e))?;
    let mut response = stub.fetch_with_request(request).await.map_err(|e| EdgeError::platform("call fetch", e))?;
    let body = response.text().await.map_err(|e| EdgeError::platform("call answer", e))?;
    let value: serde_json::Value = serde_json::from_str(&body).map_err(|e| EdgeError::platform("call answer", e))?;
    crate::api::http::json(response.status_code(), &value)
}

/// `POST /__e2e/sql` `{"sql": "..."}` -> `{"results": [...]}`: lets the end-to-end tests count
/// rows through the worker's own D1 binding (an outside reader of the local database file would
/// contend for its lock). It exists only in the test build. The statement runs in every account
/// database (`DB` and each `ACCOUNTS_<n>`) and the rows of all of them come back together; with
/// `"events": true`, in every database of the dedupe log instead; with `"binding": "EVENTS_1"`,
/// in that one.
async fn sql(mut req: worker::Request, env: &worker::Env) -> Result<worker::Response, crate::error::EdgeError> {
    #[derive(serde::Deserialize)]
    struct Query {
        sql: String,
        #[serde(default)]
        events: bool,
        #[serde(default)]
        binding: Option<String>,
    }
    let query: Query = crate::api::http::json_body(&mut req).await?;
    let log = crate::store::carrier_events::Log::open(env, &*crate::config::get(env)?);
    let databases = match (&query.binding, query.events) {
        (Some(binding), _) => vec![log.database(binding)?],
        (None, true) => log.bindings().iter().map(|b| log.database(b)).collect::<Result<_, _>>()?,
        (None, false) => crate::store::routes::databases(env, &*crate::config::get(env)?)
            .iter()
            .map(|b| crate::store::d1(env, b))
            .collect::<Result<_, _>>()?,
    };
    let mut rows = Vec::new();
    for db in &databases {
        rows.extend(
            crate::testing::checks::raw(db, &query.sql)
                .await
                .map_err(|e| EdgeError::BadRequest(format!("sql failed: {e}")))?,
        );
    }
    crate::api::http::json(200, &serde_json::json!({ "results": rows }))
}
