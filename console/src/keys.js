// Access: the account's API keys (create, with its scope; revoke), portal links for the
// account's own customers (create; list the live ones; revoke one), and the origins that may
// embed the portal. Scope `full` only: the API
// answers 403 to any other key, and the page shows the API's words.
import { useState } from 'preact/hooks';
import * as api from './client.ts';
import { Badge, ErrorBox, Loading, Notice, PageTitle, Pager, Table, Time, html, useAction, useLoad } from './ui.js';

function ShownOnce({ label, value }) {
  return html`<div class="secret" role="status" aria-label=${label}>
    <p><strong>${label} (shown once):</strong></p>
    <p><code class="id">${value}</code> <button type="button" onClick=${() => navigator.clipboard && navigator.clipboard.writeText(value)}>Copy</button></p>
  </div>`;
}

function NewKey({ onCreated }) {
  const [name, setName] = useState('');
  const [scope, setScope] = useState('read');
  const [state, run] = useAction();
  const submit = async (e) => {
    e.preventDefault();
    if (await run(() => api.createKey({ name: name.trim(), scope }))) {
      setName('');
      onCreated();
    }
  };
  return html`<form class="row panel" aria-label="New API key" onSubmit=${submit}>
    <div class="field"><label for="key-name">Key name</label>
      <input id="key-name" required maxlength="100" value=${name} onInput=${(e) => setName(e.currentTarget.value)} /></div>
    <div class="field"><label for="key-scope">Scope</label>
      <select id="key-scope" value=${scope} onChange=${(e) => setScope(e.currentTarget.value)}>
        <option value="full">full: everything</option>
        <option value="read">read: every read, no keys</option>
        <option value="endpoints">endpoints: webhooks only</option>
      </select></div>
    <div><button class="primary" type="submit" disabled=${state.busy}>Create key</button></div>
    <${ErrorBox} error=${state.error} />
    ${state.done ? html`<${ShownOnce} label="API key" value=${state.done.api_key} />` : null}
  </form>`;
}

function PortalLink({ onCreated }) {
  const [readOnly, setReadOnly] = useState(true);
  const [endpoints, setEndpoints] = useState('');
  const [state, run] = useAction();
  const submit = (e) => {
    e.preventDefault();
    const ids = endpoints.split(/[\s,]+/).filter(Boolean);
    run(() => api.createPortalSession({ read_only: readOnly, ...(ids.length ? { endpoint_ids: ids } : {}) })).then((ok) => ok && onCreated());
  };
  return html`<form class="stack panel" aria-label="New portal link" onSubmit=${submit}>
    <label class="check" for="portal-read-only"><input id="portal-read-only" type="checkbox" checked=${readOnly} onChange=${(e) => setReadOnly(e.currentTarget.checked)} /> Read-only</label>
    <div class="field"><label for="portal-endpoints">Only these endpoints (ids, optional)</label>
      <input id="portal-endpoints" spellcheck="false" value=${endpoints} onInput=${(e) => setEndpoints(e.currentTarget.value)} /></div>
    <div><button type="submit" disabled=${state.busy}>Create a portal link (valid an hour)</button></div>
    <${ErrorBox} error=${state.error} />
    ${state.done ? html`<${ShownOnce} label="Portal link" value=${state.done.url} />` : null}
  </form>`;
}

// The live portal links, those that end last first: one is revoked alone, so a leaked link ends
// without rotating the key that made it.
function PortalSessions({ version }) {
  const [cursor, setCursor] = useState(undefined);
  const list = useLoad(() => api.listPortalSessions({ cursor, limit: 20 }), `${version}:${cursor || ''}`);
  const [action, run] = useAction();
  const revoke = async (s) => {
    if (!confirm(`Revoke portal link ${s.id}? It stops working at once.`)) return;
    // A 204 carries no body: the list is read again whatever the answer, and shows what is live.
    await run(() => api.revokePortalSession(s.id));
    list.reload(true);
  };
  return html`<div class="stack">
    <${ErrorBox} error=${list.error || action.error} />
    ${list.loading && !list.data ? html`<${Loading} what="portal links" />` : null}
    ${list.data ? html`
      <${Table} label="Portal links" head=${['Link', 'Access', 'Endpoints', 'Created', 'Expires', '']}>
        ${list.data.data.map((s) => html`<tr>
          <td><code class="id">${s.id}</code></td><td>${s.read_only ? 'read-only' : 'read and write'}</td>
          <td>${s.endpoint_ids ? s.endpoint_ids.join(', ') : 'all'}</td>
          <td class="nowrap"><${Time} at=${s.created_at} /></td><td class="nowrap"><${Time} at=${s.expires_at} /></td>
          <td><button type="button" disabled=${action.busy} onClick=${() => revoke(s)}>Revoke link</button></td>
        </tr>`)}
      <//>
      ${list.data.data.length === 0 ? html`<p class="muted small">No live portal links.</p>` : null}
      ${list.data.next_cursor ? html`<div><button type="button" onClick=${() => setCursor(list.data.next_cursor)}>Later links</button></div>` : null}` : null}
  </div>`;
}

function Origins() {
  const account = useLoad(() => api.getAccount(), 'account');
  const [text, setText] = useState(null);
  const [state, run] = useAction();
  if (!account.data) return html`<${ErrorBox} error=${account.error} />`;
  const value = text ?? account.data.portal_origins.join('\n');
  const submit = async (e) => {
    e.preventDefault();
    const origins = value.split(/\s+/).filter(Boolean);
    if (await run(() => api.updateAccount({ portal_origins: origins }))) {
      setText(null);
      account.reload(true);
    }
  };
  return html`<form class="stack panel" aria-label="Portal origins" onSubmit=${submit}>
    <div class="field"><label for="portal-origins">Origins that may embed the portal (one per line; none: it cannot be framed)</label>
      <textarea id="portal-origins" rows="3" spellcheck="false" value=${value} onInput=${(e) => setText(e.currentTarget.value)}></textarea></div>
    <div><button type="submit" disabled=${state.busy}>Save origins</button></div>
    <${ErrorBox} error=${state.error} />
    ${state.done ? html`<${Notice}>Saved.<//>` : null}
  </form>`;
}

export function KeysPage({ query }) {
  const { cursor } = query;
  const [links, setLinks] = useState(0);
  const list = useLoad(() => api.listKeys({ cursor, limit: 20 }), cursor || '');
  const [action, run] = useAction();
  const revoke = async (key) => {
    if (!confirm(`Revoke ${key.name} (${key.prefix}…)? Requests with it are refused from now on.`)) return;
    if (await run(() => api.revokeKey(key.id))) list.reload(true);
  };
  return html`<section>
    <${PageTitle}>Access<//>
    <h2>API keys</h2>
    <p class="muted small">Rotate a key by creating its successor, moving your callers to it, then revoking the old one.</p>
    <${NewKey} onCreated=${() => list.reload(true)} />
    <${ErrorBox} error=${list.error || action.error} />
    ${list.loading && !list.data ? html`<${Loading} what="keys" />` : null}
    ${list.data ? html`
      <${Table} label="API keys" head=${['Name', 'Key', 'Scope', 'Created', 'Last used', 'State', '']}>
        ${list.data.data.map((k) => html`<tr>
          <td>${k.name}</td><td><code>${k.prefix}…</code></td><td>${k.scope}</td>
          <td class="nowrap"><${Time} at=${k.created_at} /></td><td class="nowrap"><${Time} at=${k.last_used_at} /></td>
          <td><${Badge} value=${k.revoked_at ? 'revoked' : 'live'} /></td>
          <td>${k.revoked_at ? null : html`<button type="button" disabled=${action.busy} onClick=${() => revoke(k)}>Revoke</button>`}</td>
        </tr>`)}
      <//>
      <${Pager} base="/keys" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
    <h2>Portal</h2>
    <p class="muted small">A portal link opens this account's webhooks (endpoints, their delivery log, events) for one of your customers, without a key.</p>
    <${PortalLink} onCreated=${() => setLinks(links + 1)} />
    <${PortalSessions} version=${links} />
    <${Origins} />
  </section>`;
}
