// The floor's ingest: the same D1 insert (+ read-back) and queue send as the product's, with no
// verification and no parsing. The event id comes from the `x-event-id` header.
export async function ingest(request, env) {
  const body = await request.text();
  const eventId = request.headers.get("x-event-id");
  const [inserted, selected] = await env.DB.batch([
    env.DB.prepare(
      "INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, attempts, created_at) VALUES ('telnyx', ?1, 'message.received', ?2, 0, ?3) ON CONFLICT (carrier, carrier_event_id) DO NOTHING",
    ).bind(eventId, body, Date.now()),
    env.DB.prepare("SELECT CAST(id AS TEXT) AS id, processed_at, error FROM carrier_events WHERE carrier = 'telnyx' AND carrier_event_id = ?1").bind(eventId),
  ]);
  const row = selected.results[0];
  if (inserted.meta.changes === 1) {
    await env.JOBS.send({ type: "carrier_event", id: row.id });
  }
  return Response.json({ id: row.id, outcome: inserted.meta.changes === 1 ? "accepted" : "duplicate" });
}
