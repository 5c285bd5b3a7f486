// Webhook endpoints: create, edit event types, enable/disable (or pause/resume where the API
// has it), rotate the secret, and the controls that light up when their routes exist.
import { useState } from 'preact/hooks';
import * as api from './client.ts';
import {
  Badge, ErrorBox, EVENT_TYPES, Facts, Loading, Notice, PageTitle, Pager, Table, Time, html, useAction, useLoad,
} from './ui.js';
import { navigate } from './router.js';
import { DeliveryLog } from './deliverylog.js';

export function EndpointsPage({ query, access }) {
  const { cursor } = query;
  const list = useLoad(() => api.listEndpoints({ cursor, limit: 20 }), cursor || '');
  // A portal session limited to some endpoints, or read-only, creates none (the API refuses it).
  const creates = !access || (!access.read_only && !access.endpoint_ids);
  return html`<section>
    <${PageTitle}>Endpoints<//>
    ${creates ? html`<${CreateEndpoint} onCreated=${() => list.reload(true)} />` : null}
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="endpoints" />` : null}
    ${list.data ? html`
      <${Table} label="Endpoints" head=${['Endpoint', 'URL', 'State', 'Circuit', 'Event types', 'Failures']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="6" class="muted">No endpoints yet.</td></tr>` : null}
        ${list.data.data.map((ep) => html`<tr>
          <td><a href=${`#/endpoints/${encodeURIComponent(ep.id)}`}>${ep.id}</a></td>
          <td class="clip">${ep.url}</td>
          <td><${Badge} value=${stateOf(ep)} /></td>
          <td><${Badge} value=${ep.circuit} /></td>
          <td class="small">${ep.event_types.join(', ')}</td>
          <td>${ep.consecutive_failures}</td>
        </tr>`)}
      <//>
      <${Pager} base="/endpoints" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

function stateOf(ep) {
  if (ep.paused) return 'paused';
  return ep.enabled ? 'enabled' : 'disabled';
}

/** How the endpoint receives a resource's events, as the facts table says it. */
function orderingOf(ep) {
  if (ep.ordering !== 'resource') return 'none: each event as it is ready (sort by sequence)';
  const exhausted = ep.on_exhausted === 'hold' ? 'an exhausted event holds its resource' : 'an exhausted event is skipped and named in exactly-skipped';
  return `per resource, in sequence, one at a time; ${exhausted}`;
}

function EventTypes({ idPrefix, selected, onChange }) {
  const toggle = (type) => onChange(selected.includes(type) ? selected.filter((t) => t !== type) : [...selected, type]);
  return html`<fieldset class="types">
    <legend>Event types</legend>
    ${EVENT_TYPES.map((type) => html`<label class="check" for=${`${idPrefix}-${type}`}>
      <input type="checkbox" id=${`${idPrefix}-${type}`} checked=${selected.includes(type)} onChange=${() => toggle(type)} /> ${type}
    </label>`)}
  </fieldset>`;
}

function Secret({ secret }) {
  if (!secret) return null;
  return html`<div class="secret" role="status">
    <p><strong>Signing secret (shown once):</strong></p>
    <p><code class="id">${secret}</code> <button type="button" onClick=${() => navigator.clipboard && navigator.clipboard.writeText(secret)}>Copy</button></p>
  </div>`;
}

function CreateEndpoint({ onCreated }) {
  const [url, setUrl] = useState('');
  const [types, setTypes] = useState(['message.received', 'message.delivered', 'message.failed']);
  const [state, run] = useAction();
  const submit = async (e) => {
    e.preventDefault();
    const created = await run(() => api.createEndpoint({ url: url.trim(), event_types: types }));
    if (created) {
      setUrl('');
      onCreated();
    }
  };
  return html`<details class="panel" open=${Boolean(state.done)}>
    <summary>Add an endpoint</summary>
    <form class="stack" onSubmit=${submit}>
      <div class="field"><label for="endpoint-url">URL</label>
        <input id="endpoint-url" type="url" required placeholder="https://hooks.example.com/in" value=${url} onInput=${(e) => setUrl(e.currentTarget.value)} /></div>
      <${EventTypes} idPrefix="new-type" selected=${types} onChange=${setTypes} />
      <${ErrorBox} error=${state.error} />
      <div><button class="primary" type="submit" disabled=${state.busy}>Create endpoint</button></div>
    </form>
    ${state.done ? html`<p>Created <a href=${`#/endpoints/${encodeURIComponent(state.done.id)}`}>${state.done.id}</a>.</p><${Secret} secret=${state.done.secret} />` : null}
  </details>`;
}

export function EndpointPage({ id, access }) {
  const readOnly = Boolean(access && access.read_only);
  const detail = useLoad(async () => {
    const endpoint = await api.getEndpoint(id);
    return { endpoint };
  }, id);
  const [action, run] = useAction();
  const [edit, setEdit] = useState(null);
  const [since, setSince] = useState('');
  const [testType, setTestType] = useState('endpoint.test');
  if (!detail.data) {
    return html`<section><${PageTitle}>Endpoint<//><${ErrorBox} error=${detail.error} />${detail.loading ? html`<${Loading} what="the endpoint" />` : null}</section>`;
  }
  const { endpoint: ep } = detail.data;
  const form = edit || {
    url: ep.url, types: ep.event_types, filter: ep.filter || '', rate: ep.rate_limit_per_second ? String(ep.rate_limit_per_second) : '',
    ordering: ep.ordering, onExhausted: ep.on_exhausted,
  };
  const act = async (label, call) => {
    const done = await run(async () => ({ label, answer: await call() }));
    if (done) {
      setEdit(null);
      detail.reload(true);
    }
  };
  return html`<section>
    <${PageTitle}>Endpoint <code class="id">${ep.id}</code><//>
    <p class="status-line">State <${Badge} value=${stateOf(ep)} /> <button type="button" disabled=${detail.loading} onClick=${() => detail.reload(false)}>Refresh</button></p>
    <${Facts} rows=${[
      ['URL', ep.url],
      ['Disabled because', ep.disabled_reason || undefined],
      ['Circuit', html`<${Badge} value=${ep.circuit} />`],
      ['Next probe', ep.next_probe_at ? html`<${Time} at=${ep.next_probe_at} />` : undefined],
      ['Held deliveries', String(ep.held_count)],
      ['Attempts in flight', `${ep.in_flight} of at most ${ep.max_in_flight}`],
      ['Rate limit', ep.rate_limit_per_second ? `${ep.rate_limit_per_second} per second` : 'none'],
      ['Ordering', orderingOf(ep)],
      ['Filter', ep.filter ? html`<code>${ep.filter}</code>` : 'none: every event of its types'],
      ['Custom headers', Object.keys(ep.headers || {}).length ? Object.keys(ep.headers).join(', ') : 'none'],
      ['Consecutive failures', String(ep.consecutive_failures)],
      ['Created', html`<${Time} at=${ep.created_at} />`],
      ['Updated', html`<${Time} at=${ep.updated_at} />`],
    ]} />
    <${ErrorBox} error=${action.error} />
    ${action.done ? html`<${Notice}>${action.done.label}.<//>` : null}
    ${action.done && action.done.answer && action.done.answer.secret ? html`<${Secret} secret=${action.done.answer.secret} />` : null}
    ${readOnly ? html`<p class="muted small">Read-only: this portal link shows the endpoint and its deliveries, and changes nothing.</p>` : html`
    <div class="actions" role="group" aria-label="Endpoint actions">
      <button type="button" disabled=${action.busy} onClick=${() => act(ep.paused ? 'Resumed' : 'Paused', () => api.updateEndpoint(id, { paused: !ep.paused }))}>${ep.paused ? 'Resume' : 'Pause'}</button>
      ${ep.enabled ? null : html`<button type="button" disabled=${action.busy} onClick=${() => act('Enabled', () => api.updateEndpoint(id, { enabled: true }))}>Enable</button>`}
      <button type="button" disabled=${action.busy} onClick=${() => confirm('Rotate the signing secret? The old one stops being used.') && act('Secret rotated', () => api.rotateSecret(id))}>Rotate secret</button>
      <label class="visually-hidden" for="test-type">Test event type</label>
      <select id="test-type" value=${testType} onChange=${(e) => setTestType(e.currentTarget.value)}>
        ${['endpoint.test', ...EVENT_TYPES].map((t) => html`<option value=${t}>${t}</option>`)}
      </select>
      <button type="button" disabled=${action.busy} onClick=${() => act('Test event sent', () => api.testEndpoint(id, testType))}>Send test event</button>
      <button type="button" class="danger" disabled=${action.busy} onClick=${async () => {
        if (!confirm(`Delete ${ep.id}?`)) return;
        const done = await run(() => api.deleteEndpoint(id));
        if (done) navigate('/endpoints');
      }}>Delete</button>
    </div>
    <form class="panel row" aria-label="Recover" onSubmit=${(e) => {
      e.preventDefault();
      act('Recovery queued', () => api.recoverEndpoint(id, new Date(since).toISOString()));
    }}>
      <div class="field"><label for="recover-since">Recover failed deliveries since</label>
        <input id="recover-since" type="datetime-local" required value=${since} onInput=${(e) => setSince(e.currentTarget.value)} /></div>
      <div><button type="submit" disabled=${action.busy}>Recover</button></div>
    </form>
    <h2>Edit</h2>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      act('Saved', () => api.updateEndpoint(id, {
        url: form.url.trim(), event_types: form.types, filter: form.filter.trim() || null,
        rate_limit_per_second: form.rate.trim() ? Number(form.rate) : null,
        ordering: form.ordering, on_exhausted: form.onExhausted,
      }));
    }}>
      <div class="field"><label for="edit-url">URL</label>
        <input id="edit-url" type="url" required value=${form.url} onInput=${(e) => setEdit({ ...form, url: e.currentTarget.value })} /></div>
      <${EventTypes} idPrefix="edit-type" selected=${form.types} onChange=${(types) => setEdit({ ...form, types })} />
      <div class="field"><label for="edit-filter">Filter (only events that pass it are delivered; empty for all)</label>
        <input id="edit-filter" type="text" spellcheck="false" placeholder='data.direction = "inbound"' value=${form.filter} onInput=${(e) => setEdit({ ...form, filter: e.currentTarget.value })} /></div>
      <div class="field"><label for="edit-rate">Rate limit (deliveries a second; empty for none)</label>
        <input id="edit-rate" type="number" min="1" inputmode="numeric" value=${form.rate} onInput=${(e) => setEdit({ ...form, rate: e.currentTarget.value })} /></div>
      <div class="field"><label for="edit-ordering">Ordering</label>
        <select id="edit-ordering" value=${form.ordering} onChange=${(e) => setEdit({ ...form, ordering: e.currentTarget.value })}>
          <option value="none">none: each event as it is ready</option>
          <option value="resource">resource: each message's and call's events in order, one at a time</option>
        </select></div>
      <div class="field"><label for="edit-exhausted">When an ordered event is exhausted</label>
        <select id="edit-exhausted" value=${form.onExhausted} onChange=${(e) => setEdit({ ...form, onExhausted: e.currentTarget.value })}>
          <option value="skip">skip it: the next goes, naming it in exactly-skipped</option>
          <option value="hold">hold the resource until it is delivered</option>
        </select></div>
      <div><button class="primary" type="submit" disabled=${action.busy}>Save</button></div>
    </form>`}
    <${DeliveryLog} endpointId=${ep.id} readOnly=${readOnly} />
  </section>`;
}
