// The end-to-end floor: per inbound message the I/O the product cannot do without, and nothing
// else. No verification, no parsing, no rules, no signing, no reads that a statement could do:
//
// 1. ingest: the floor's insert (+ read-back) and jobs queue send (./ingest.js);
// 2. a job: one D1 batch that writes the message, its outbox event and its delivery (each
//    derived in SQL from the stored event, the event's body returned by the INSERT) and marks
//    the event processed; then the deliveries queue send;
// 3. a delivery: the POST to the customer's endpoint (`ENDPOINT_URL`), then one D1 batch that
//    records it (the delivery's status and its attempt row).
//
// Every message of a batch at once, and a delivery's POST beside its batch (`waitUntil`), as
// the product does. The account `acct_floor` is written by the benchmark before the load.
import { ingest } from "./ingest.js";

const ACCOUNT = "acct_floor";

async function job(env, message) {
  const id = message.body.id;
  const now = Date.now();
  const db = env.DB;
  const [, event] = await db.batch([
    db.prepare(
      `INSERT INTO messages (id, account_id, direction, from_number, to_number, text, segments, encoding, status, carrier, carrier_message_id, created_at, updated_at)
       SELECT 'msg_' || id, ?2, 'inbound', '+15559990000', '+15550000000', payload, 1, 'gsm7', 'received', 'telnyx', 'msg-' || carrier_event_id, ?3, ?3
       FROM carrier_events WHERE id = ?1
       ON CONFLICT (carrier, carrier_message_id) DO NOTHING`,
    ).bind(id, ACCOUNT, now),
    db.prepare(
      `INSERT INTO outbound_events (id, account_id, type, resource_id, payload, created_at)
       SELECT 'evt_' || id, ?2, 'message.received', 'msg_' || id,
              json_object('type', 'message.received', 'data', json_object('carrier_message_id', 'msg-' || carrier_event_id, 'text', payload)), ?3
       FROM carrier_events WHERE id = ?1
       ON CONFLICT DO NOTHING
       RETURNING id, payload`,
    ).bind(id, ACCOUNT, now),
    db.prepare(
      `INSERT INTO webhook_deliveries (id, event_id, endpoint_id, account_id, kind, status, next_attempt_at, created_at, updated_at)
       SELECT 'dlv_' || id, 'evt_' || id, 'ep_floor', ?2, 'initial', 'pending', ?3, ?3, ?3
       FROM carrier_events WHERE id = ?1
       ON CONFLICT DO NOTHING`,
    ).bind(id, ACCOUNT, now),
    db.prepare("UPDATE carrier_events SET processed_at = ?2, attempts = attempts + 1 WHERE id = ?1 AND processed_at IS NULL").bind(id, now),
  ]);
  for (const row of event.results) {
    await env.DELIVERIES.send({ id: "dlv_" + id, event: row.id, body: row.payload });
  }
  message.ack();
}

async function deliver(env, message) {
  const { id, event, body } = message.body;
  const started = Date.now();
  let status = null;
  let error = null;
  try {
    const response = await fetch(env.ENDPOINT_URL, {
      method: "POST",
      headers: { "content-type": "application/json", "webhook-id": event },
      body,
    });
    await response.arrayBuffer();
    status = response.status;
  } catch (e) {
    error = String(e);
  }
  const now = Date.now();
  await env.DB.batch([
    env.DB.prepare(
      "UPDATE webhook_deliveries SET status = ?2, attempts = attempts + 1, last_error = ?3, updated_at = ?4 WHERE id = ?1 AND status = 'pending'",
    ).bind(id, status !== null && status < 300 ? "succeeded" : "failed", error, now),
    env.DB.prepare(
      "INSERT INTO webhook_attempts (delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms, error) VALUES (?1, 1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT DO NOTHING",
    ).bind(id, started, Math.floor(started / 1000), status, now - started, error),
  ]);
}

export default {
  fetch: ingest,
  async queue(batch, env, ctx) {
    if (batch.queue === "exactly-jobs") {
      await Promise.all(batch.messages.map((message) => job(env, message)));
    } else {
      for (const message of batch.messages) {
        ctx.waitUntil(deliver(env, message));
        message.ack();
      }
    }
  },
};
