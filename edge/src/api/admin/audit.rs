//! `GET /admin/audit`: where the running audit stands in each account database, and the newest
//! violations it found (docs/contract.md, "The running audit").

use serde_json::{json, Value};
use worker::{Request, Response};

use crate::api::auth::{self, Ctx};
use crate::api::http;
use crate::error::EdgeError;
use crate::store::audit;

/// The most violations shown, newest first, across databases.
const SHOWN: usize = 50;

/// Each database's checks (position, rows checked, findings, last run), the total found, and the
/// newest violations with the rows they name.
pub async fn get(req: Request, ctx: &Ctx<'_>) -> Result<Response, EdgeError> {
    auth::admin(&req, ctx.config)?;
    let mut databases = Vec::new();
    let mut violations = Vec::new();
    let mut found = 0;
    for binding in crate::store::routes::databases(ctx.env, ctx.config) {
        let db = crate::store::d1(ctx.env, &binding)?;
        let checks: Vec<Value> = audit::standings(&db)
            .await?
            .into_iter()
            .map(|s| {
                found += s.found;
                json!({"check": s.name, "position": s.position, "checked": s.checked, "found": s.found,
                       "ran_at": s.ran_at.map(|t| t.to_rfc3339())})
            })
            .collect();
        databases.push(json!({"database": binding, "checks": checks}));
        violations.extend(audit::violations(&db, SHOWN as i64).await?);
    }
    violations.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
    violations.truncate(SHOWN);
    let shown: Vec<Value> = violations
        .iter()
        .map(|v| {
            let body: Value = serde_json::from_str(&v.payload).unwrap_or(Value::Null);
            let data = &body["data"];
            json!({"event_id": v.id, "created_at": v.created_at.to_rfc3339(), "check": data["check"],
                   "database": data["database"], "rows": data["rows"], "detail": data["detail"]})
        })
        .collect();
    http::json(200, &json!({"found": found, "databases": databases, "violations": shown}))
}
