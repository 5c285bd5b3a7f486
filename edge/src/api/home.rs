//! `GET /`: a page that says where things are, so a browser pointed at the worker finds the
//! console, the API's document and the readiness check instead of an error.

use worker::Response;

use crate::error::EdgeError;

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>exactly</title>
<h1>exactly</h1>
<p>Exactly-once carrier webhooks: this worker is running.</p>
<ul>
<li><a href="/console/">The console</a>: sign in with an API key or the admin token.</li>
<li><a href="/openapi.json">The API's document</a> (OpenAPI 3.1): <code>/v1</code> and <code>/admin</code>.</li>
<li><a href="/healthz">Readiness</a>: the configuration and every database.</li>
</ul>
<p>Carriers post to <code>/webhooks/telnyx</code>, <code>/webhooks/twilio</code> and <code>/webhooks/plivo</code>.</p>
</html>
"#;

/// The page, with a policy that lets it load nothing.
pub fn page() -> Result<Response, EdgeError> {
    let mut response = Response::from_html(PAGE).map_err(|e| EdgeError::platform("respond", e))?;
    let headers = response.headers_mut();
    for (name, value) in [("content-security-policy", "default-src 'none'"), ("x-content-type-options", "nosniff")] {
        headers.set(name, value).map_err(|e| EdgeError::platform("header", e))?;
    }
    Ok(response)
}
