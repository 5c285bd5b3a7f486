// An idiomatic JavaScript worker doing the product's three ingest steps: verify the Telnyx
// Ed25519 signature with WebCrypto (300 s tolerance both ways), parse the envelope, then the
// same D1 insert (+ read-back) and queue send. The baseline a team would write without Rust.
const encoder = new TextEncoder();
let keyPromise;

function importKey(base64) {
  const raw = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  return crypto.subtle.importKey("raw", raw, { name: "Ed25519" }, false, ["verify"]);
}

function error(status, code, message) {
  return Response.json({ error: { code, message } }, { status });
}

export default {
  async fetch(request, env) {
    const body = new Uint8Array(await request.arrayBuffer());
    if (body.length > 256 * 1024) return error(413, "body_too_large", "body larger than 262144 bytes");
    const signature = request.headers.get("telnyx-signature-ed25519");
    const timestamp = request.headers.get("telnyx-timestamp");
    if (!signature || !timestamp || !/^\d{1,12}$/.test(timestamp)) return error(401, "invalid_signature", "missing or malformed header");
    if (Math.abs(Math.floor(Date.now() / 1000) - Number(timestamp)) > 300) return error(401, "invalid_signature", "timestamp outside the tolerance");
    let sig;
    try {
      sig = Uint8Array.from(atob(signature), (c) => c.charCodeAt(0));
    } catch {
      return error(401, "invalid_signature", "malformed signature");
    }
    const prefix = encoder.encode(timestamp + "|");
    const message = new Uint8Array(prefix.length + body.length);
    message.set(prefix);
    message.set(body, prefix.length);
    keyPromise ??= importKey(env.TELNYX_PUBLIC_KEY);
    const ok = await crypto.subtle.verify({ name: "Ed25519" }, await keyPromise, sig, message);
    if (!ok) return error(401, "invalid_signature", "signature does not match");
    let event;
    try {
      event = JSON.parse(new TextDecoder().decode(body));
    } catch {
      return error(400, "malformed_event", "body is not JSON");
    }
    const data = event?.data;
    if (!data?.id || !data?.event_type) return error(400, "malformed_event", "missing data.id or data.event_type");
    const [inserted, selected] = await env.DB.batch([
      env.DB.prepare(
        "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at) VALUES ('telnyx', ?1, ?2, ?3, 0, ?4) ON CONFLICT (carrier, carrier_event_id) DO NOTHING",
      ).bind(data.id, data.event_type, new TextDecoder().decode(body), Date.now()),
      env.DB.prepare("SELECT CAST(id AS TEXT) AS id, processed_at, error FROM carrier_events WHERE carrier = 'telnyx' AND carrier_event_id = ?1").bind(data.id),
    ]);
    const row = selected.results[0];
    if (inserted.meta.changes === 1) {
      await env.JOBS.send({ type: "carrier_event", id: row.id });
    }
    return Response.json({ id: row.id, outcome: inserted.meta.changes === 1 ? "accepted" : "duplicate" });
  },
};
