// An endpoint's delivery log: every attempt with what was sent (headers with the signature, and
// the body) and what came back (status, latency, headers, the first KiB), filtered; and "retry
// all failed", one operation whose progress is shown until it is done.
import { useState } from 'preact/hooks';
import * as api from './client.ts';
import { Badge, ErrorBox, EVENT_TYPES, Loading, Notice, Select, Table, Time, html, useAction, useInterval, useLoad } from './ui.js';

const STATUSES = ['pending', 'succeeded', 'failed', 'filtered'];

function Headers({ label, headers }) {
  const entries = Object.entries(headers || {});
  if (entries.length === 0) return html`<p class="muted small">${label}: none recorded.</p>`;
  return html`<dl class="headers" aria-label=${label}>
    ${entries.map(([name, value]) => html`<div><dt>${name}</dt><dd><code>${String(value ?? '')}</code></dd></div>`)}
  </dl>`;
}

/** A body as sent: JSON laid out to read, anything else as it is. */
function pretty(body) {
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body ?? '';
  }
}

function Attempt({ a }) {
  return html`<details class="attempt">
    <summary><${Time} at=${a.attempted_at} /> · ${a.event_type} · attempt ${a.attempt} · ${a.status_code ?? 'no answer'} · ${a.latency_ms} ms</summary>
    <div class="grid2">
      <section aria-label="Request">
        <h3>Request</h3>
        <p class="small"><code>${a.request.method} ${a.request.url}</code></p>
        <${Headers} label="Request headers" headers=${a.request.headers} />
        <pre class="body">${pretty(a.request.body)}</pre>
      </section>
      <section aria-label="Response">
        <h3>Response</h3>
        ${a.error ? html`<p class="bad small">${a.error}</p>` : null}
        <${Headers} label="Response headers" headers=${a.response_headers} />
        <pre class="body">${a.response_body ?? ''}</pre>
      </section>
    </div>
  </details>`;
}

/** The operation's progress, asked again every second until nothing of it is pending. */
function RetryProgress({ endpointId, retry }) {
  const [shown, setShown] = useState(retry);
  useInterval(async () => setShown(await api.getRetry(endpointId, retry.id)), 1000, shown.status !== 'done');
  return html`<div class="panel" role="status" aria-label="Retry progress">
    <strong>Retry ${shown.status === 'done' ? 'done' : 'running'}</strong>:
    ${shown.total} re-sent · ${shown.succeeded} succeeded · ${shown.failed} failed again · ${shown.pending} pending
    ${shown.total >= shown.limit ? html`<span class="muted small"> (at most ${shown.limit} at a time: retry again for the rest)</span>` : null}
  </div>`;
}

export function DeliveryLog({ endpointId, readOnly }) {
  const [filter, setFilter] = useState({ status: '', event_type: '', webhook_id: '', resource_id: '', since: '', until: '' });
  const [pages, setPages] = useState([undefined]);
  const cursor = pages[pages.length - 1];
  const key = JSON.stringify([filter, cursor]);
  // A time input's local time, as the API's RFC 3339 (empty stays unset).
  const iso = (local) => (local ? new Date(local).toISOString() : '');
  const log = useLoad(() => api.listAttempts(endpointId, { ...filter, since: iso(filter.since), until: iso(filter.until), cursor, limit: 20 }), key);
  const [action, run] = useAction();
  const [retry, setRetry] = useState(null);
  const set = (name) => (value) => { setPages([undefined]); setFilter({ ...filter, [name]: value }); };
  const retryAll = async () => {
    const body = Object.fromEntries(Object.entries({ event_type: filter.event_type, webhook_id: filter.webhook_id, resource_id: filter.resource_id }).filter(([, v]) => v));
    const started = await run(() => api.retryFailed(endpointId, body));
    if (started) setRetry(started);
  };
  return html`<section aria-label="Delivery log">
    <h2>Delivery log</h2>
    <form class="row filters" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="log-status" label="Status" value=${filter.status} options=${STATUSES} onChange=${set('status')} />
      <${Select} id="log-type" label="Event type" value=${filter.event_type} options=${EVENT_TYPES} onChange=${set('event_type')} />
      <div class="field"><label for="log-webhook-id">Webhook id</label>
        <input id="log-webhook-id" type="search" spellcheck="false" value=${filter.webhook_id} onChange=${(e) => set('webhook_id')(e.currentTarget.value.trim())} /></div>
      <div class="field"><label for="log-resource">Message or call id</label>
        <input id="log-resource" type="search" spellcheck="false" value=${filter.resource_id} onChange=${(e) => set('resource_id')(e.currentTarget.value.trim())} /></div>
      <div class="field"><label for="log-since">From</label>
        <input id="log-since" type="datetime-local" value=${filter.since} onChange=${(e) => set('since')(e.currentTarget.value)} /></div>
      <div class="field"><label for="log-until">Until</label>
        <input id="log-until" type="datetime-local" value=${filter.until} onChange=${(e) => set('until')(e.currentTarget.value)} /></div>
    </form>
    <div class="actions">
      <button type="button" onClick=${() => log.reload(true)}>Refresh</button>
      ${readOnly ? null : html`<button type="button" disabled=${action.busy} onClick=${retryAll}>Retry all failed${filter.event_type || filter.webhook_id || filter.resource_id ? ' (filtered)' : ''}</button>`}
    </div>
    <${ErrorBox} error=${action.error || log.error} />
    ${retry ? html`<${RetryProgress} endpointId=${endpointId} retry=${retry} key=${retry.id} />` : null}
    ${log.loading && !log.data ? html`<${Loading} what="attempts" />` : null}
    ${log.data ? html`
      <${Table} label="Attempts" head=${['When', 'Event', 'Answer', 'Latency', 'Delivery']}>
        ${log.data.data.length === 0 ? html`<tr><td colspan="5" class="muted">No attempts${filter.status || filter.event_type ? ' match' : ' yet'}.</td></tr>` : null}
        ${log.data.data.map((a) => html`<tr>
          <td class="nowrap"><${Time} at=${a.attempted_at} /></td>
          <td><code class="id">${a.event_id}</code><br /><span class="small muted">${a.event_type}</span></td>
          <td>${a.status_code ?? html`<span class="bad">no answer</span>`}</td>
          <td>${a.latency_ms} ms</td>
          <td><${Badge} value=${a.delivery_status} /></td>
        </tr>`)}
      <//>
      ${log.data.data.map((a) => html`<${Attempt} a=${a} key=${`${a.delivery_id}-${a.attempt}`} />`)}
      <nav class="pager" aria-label="Attempt pages">
        <button type="button" disabled=${pages.length === 1} onClick=${() => setPages(pages.slice(0, -1))}>Previous</button>
        <button type="button" disabled=${!log.data.next_cursor} onClick=${() => setPages([...pages, log.data.next_cursor])}>Next</button>
      </nav>` : null}
    ${action.done && !retry ? html`<${Notice}>Done.<//>` : null}
  </section>`;
}
