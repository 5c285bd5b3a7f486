// Customer events: the list, one event with every delivery and attempt, and replay.
import { useState } from 'preact/hooks';
import * as api from './client.ts';
import {
  Badge, ErrorBox, EVENT_TYPES, Json, Loading, Notice, PageTitle, Pager, Select, Table, Time, html, useAction, useInterval, useLoad,
} from './ui.js';
import { navigate } from './router.js';

export function EventsPage({ query }) {
  const { type, cursor } = query;
  const list = useLoad(() => api.listEvents({ type, cursor, limit: 20 }), `${type}|${cursor}`);
  return html`<section>
    <${PageTitle}>Events<//>
    <p class="muted">Each customer event is one real transition, delivered to every subscribed endpoint.</p>
    <form class="filters" aria-label="Filter events" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="event-type" label="Type" value=${type} options=${EVENT_TYPES} onChange=${(v) => navigate('/events', { type: v })} />
      <button type="button" onClick=${() => list.reload(false)}>Refresh</button>
    </form>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="events" />` : null}
    ${list.data ? html`
      <${Table} label="Events" head=${['Event', 'Type', 'About', 'Created']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="4" class="muted">No events yet.</td></tr>` : null}
        ${list.data.data.map((e) => html`<tr>
          <td><a href=${`#/events/${encodeURIComponent(e.id)}`}>${e.id}</a></td>
          <td>${e.type}</td>
          <td>${resourceLink(e)}</td>
          <td><${Time} at=${e.created_at} /></td>
        </tr>`)}
      <//>
      <${Pager} base="/events" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

function resourceLink(event) {
  const id = event.data && event.data.id;
  if (!id) return html`<span class="muted">–</span>`;
  const kind = event.type.startsWith('call.') ? 'calls' : 'messages';
  return html`<a href=${`#/${kind}/${encodeURIComponent(id)}`}>${id}</a>`;
}

export function EventPage({ id }) {
  const detail = useLoad(() => api.getEvent(id), id);
  const [replay, runReplay] = useAction();
  const [target, setTarget] = useState('');
  const pending = detail.data && detail.data.deliveries.some((d) => d.status === 'pending');
  useInterval(() => detail.reload(true), 2000, Boolean(pending));
  if (!detail.data) {
    return html`<section><${PageTitle}>Event<//><${ErrorBox} error=${detail.error} />${detail.loading ? html`<${Loading} what="the event" />` : null}</section>`;
  }
  const { event, deliveries } = detail.data;
  const endpoints = [...new Set(deliveries.map((d) => d.endpoint_id))];
  const doReplay = async (e) => {
    e.preventDefault();
    const done = await runReplay(() => api.replayEvent(event.id, target || undefined));
    if (done) detail.reload(true);
  };
  return html`<section>
    <${PageTitle}>Event <code class="id">${event.id}</code><//>
    <p class="status-line">${event.type} · ${resourceLink(event)} · <${Time} at=${event.created_at} /></p>
    <${ErrorBox} error=${detail.error} />
    <form class="panel row" aria-label="Replay" onSubmit=${doReplay}>
      <div class="field">
        <label for="replay-endpoint">Replay to</label>
        <select id="replay-endpoint" value=${target} onChange=${(e) => setTarget(e.currentTarget.value)}>
          <option value="">every subscribed, enabled endpoint</option>
          ${endpoints.map((ep) => html`<option value=${ep}>${ep}</option>`)}
        </select>
      </div>
      <div><button class="primary" type="submit" disabled=${replay.busy}>${replay.busy ? 'Replaying…' : 'Replay event'}</button></div>
    </form>
    <${ErrorBox} error=${replay.error} />
    ${replay.done ? html`<${Notice}>Replay queued: ${replay.done.deliveries.join(', ')} (same webhook-id ${replay.done.event_id}).<//>` : null}
    <h2>Deliveries</h2>
    ${deliveries.length === 0 ? html`<p class="muted">No endpoint was subscribed to ${event.type} when it happened.</p>` : null}
    ${deliveries.map((d) => html`<article class="delivery" aria-label=${`Delivery ${d.id}`}>
      <h3><code>${d.id}</code> <${Badge} value=${d.status} /> <span class="muted small">${d.kind}</span></h3>
      <p class="small">To <a href=${`#/endpoints/${encodeURIComponent(d.endpoint_id)}`}>${d.endpoint_id}</a> · ${d.attempts_made} attempt(s)${d.next_attempt_at ? html` · next <${Time} at=${d.next_attempt_at} />` : null}${d.last_error ? ` · last error: ${d.last_error}` : ''}</p>
      <${Table} label=${`Attempts of ${d.id}`} head=${['#', 'At', 'Status', 'Latency', 'Response']}>
        ${d.attempts.length === 0 ? html`<tr><td colspan="5" class="muted">Not attempted yet.</td></tr>` : null}
        ${d.attempts.map((a) => html`<tr>
          <td>${a.attempt}</td><td><${Time} at=${a.attempted_at} /></td>
          <td>${a.status_code != null ? html`<span class=${a.status_code >= 200 && a.status_code < 300 ? 'ok' : 'bad'}>${a.status_code}</span>` : html`<span class="bad">no answer</span>`}</td>
          <td>${a.latency_ms} ms</td>
          <td class="clip">${a.response_snippet || a.response || a.error || (a.status_code >= 200 && a.status_code < 300 ? 'ok' : '–')}</td>
        </tr>`)}
      <//>
    </article>`)}
    <${Json} value=${event} summary="The webhook body" />
  </section>`;
}
