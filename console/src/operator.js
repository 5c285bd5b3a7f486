// The operator's pages (admin token): overview, failed carrier events with re-drive, failed
// deliveries with retry, and accounts and numbers.
import { Charts } from './charts.js';
import { useState } from 'preact/hooks';
import * as api from './client.ts';
import { Badge, ErrorBox, Facts, Loading, Notice, PageTitle, Pager, Select, Table, Time, ago, html, useAction, useLoad } from './ui.js';
import { navigate } from './router.js';

/** The value of one series in Prometheus text, e.g. `exactly_carrier_events{state="failed"}`. */
function series(text, name) {
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.slice(name.length + 1)) : null;
}

/** Counts and backlog age, from `/admin/metrics`. */
export function OverviewPage() {
  const overview = useLoad(async () => {
    const text = await api.metricsText();
    const now = Date.now();
    const since = (secs) => (secs ? new Date(now - secs * 1000).toISOString() : null);
    const tile = (label, value, href, pending, age) => ({ label, count: value ?? 0, oldest: pending ? since(age) : null, href, pending });
    return {
      counted: [
        tile('Failed carrier events', series(text, 'exactly_carrier_events{state="failed"}'), '#/ops/carrier-events?status=failed', false),
        tile('Pending carrier events', series(text, 'exactly_carrier_events{state="pending"}'), '#/ops/carrier-events?status=pending', true, series(text, 'exactly_oldest_pending_event_age_seconds')),
        tile('Failed deliveries', series(text, 'exactly_webhook_deliveries{outcome="failed"}'), '#/ops/deliveries?status=failed', false),
        tile('Pending deliveries', series(text, 'exactly_webhook_deliveries{outcome="pending"}'), '#/ops/deliveries?status=pending', true, series(text, 'exactly_oldest_pending_delivery_age_seconds')),
      ],
      ingested: series(text, 'exactly_carrier_events_ingested_total'),
    };
  }, 'overview');
  return html`<section>
    <${PageTitle}>Overview<//>
    <${ErrorBox} error=${overview.error} />
    ${overview.loading && !overview.data ? html`<${Loading} what="counts" />` : null}
    ${overview.data ? html`
      <ul class="tiles">${overview.data.counted.map((c) => html`<li class="tile">
        <a href=${c.href}><span class="tile-n">${c.count}</span> <span class="tile-label">${c.label}</span></a>
        ${c.pending ? html`<span class="small muted">${c.oldest ? `oldest waiting ${ago(c.oldest)}` : 'no backlog'}</span>` : null}
      </li>`)}</ul>
      <p class="muted small">From <code>/admin/metrics</code>: ${overview.data.ingested ?? 0} carrier events ingested in all.</p>` : null}
    <button type="button" onClick=${() => overview.reload(false)}>Refresh</button>
    <${AuditPanel} />
    <${Charts} />
  </section>`;
}

/** The running audit of exactly-once, from `/admin/audit`: what it read, and what it found. */
function AuditPanel() {
  const audit = useLoad(() => api.getAudit(), 'audit');
  const checks = audit.data ? audit.data.databases.flatMap((d) => d.checks.map((c) => ({ ...c, database: d.database }))) : [];
  const read = checks.reduce((n, c) => n + c.checked, 0);
  const last = checks.map((c) => c.ran_at).filter(Boolean).sort().pop();
  return html`<section aria-label="Audit">
    <h2>Audit of exactly-once</h2>
    <${ErrorBox} error=${audit.error} />
    ${audit.loading && !audit.data ? html`<${Loading} what="the audit" />` : null}
    ${audit.data ? html`
      <p class="audit-summary">${audit.data.found === 0 ? 'No violation found' : `${audit.data.found} violation(s) found`} in ${read} rows checked${last ? html`, last read <${Time} at=${last} />` : ', nothing read yet'}.</p>
      ${audit.data.violations.length ? html`<${Table} label="Audit violations" head=${['Check', 'Rows', 'Detail', 'Database', 'Found']}>
        ${audit.data.violations.map((v) => html`<tr>
          <td><${Badge} value=${v.check} /></td><td>${v.rows.map((r) => html`<code>${r}</code> `)}</td>
          <td class="clip">${v.detail}</td><td>${v.database}</td><td><${Time} at=${v.created_at} /></td>
        </tr>`)}
      <//>` : null}` : null}
  </section>`;
}

export function CarrierEventsPage({ query }) {
  const status = query.status || 'failed';
  const { cursor } = query;
  const list = useLoad(() => api.listCarrierEvents({ status, cursor, limit: 20 }), `${status}|${cursor}`);
  const [action, run] = useAction();
  const redrive = async (id) => {
    if (await run(() => api.retryCarrierEvent(id))) list.reload(true);
  };
  const redriveAll = async () => {
    if (await run(() => api.retryFailedCarrierEvents())) list.reload(true);
  };
  return html`<section>
    <${PageTitle}>Carrier events<//>
    <form class="filters" aria-label="Filter carrier events" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="carrier-status" label="Status" any=${null} value=${status} options=${['failed', 'pending', 'processed']} onChange=${(v) => navigate('/ops/carrier-events', { status: v })} />
      <button type="button" onClick=${() => list.reload(false)}>Refresh</button>
      ${status === 'failed' ? html`<button type="button" disabled=${action.busy} onClick=${redriveAll}>Re-drive all failed</button>` : null}
    </form>
    <${ErrorBox} error=${action.error} />
    ${action.done ? html`<${Notice}>${redriveText(action.done)}<//>` : null}
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="carrier events" />` : null}
    ${list.data ? html`
      <${Table} label="Carrier events" head=${['Event', 'Carrier', 'Type', 'Status', 'Error', 'Attempts', 'Received', '']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="8" class="muted">No ${status} carrier events.</td></tr>` : null}
        ${list.data.data.map((e) => html`<tr>
          <td><code>${e.id}</code><div class="small muted">${e.carrier_event_id}</div></td>
          <td>${e.carrier}</td><td>${e.event_type}</td><td><${Badge} value=${e.status} /></td>
          <td class="clip">${e.error || '–'}</td><td>${e.attempts}</td><td><${Time} at=${e.created_at} /></td>
          <td>${e.status !== 'processed' ? html`<button type="button" disabled=${action.busy} aria-label=${`Re-drive ${e.id}`} onClick=${() => redrive(e.id)}>Re-drive</button>` : null}</td>
        </tr>`)}
      <//>
      <${Pager} base="/ops/carrier-events" query=${{ ...query, status }} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

function redriveText(done) {
  if (typeof done.requeued === 'number') return `Re-drove ${done.requeued} failed event(s).`;
  return done.requeued ? `Re-drove ${done.id}: it is pending again.` : `${done.id} was already processed: nothing to do.`;
}

export function DeliveriesPage({ query }) {
  const status = query.status || 'failed';
  const { cursor } = query;
  const list = useLoad(() => api.listDeliveries({ status, cursor, limit: 20 }), `${status}|${cursor}`);
  const [action, run] = useAction();
  const retry = async (id) => {
    if (await run(() => api.retryDelivery(id))) list.reload(true);
  };
  return html`<section>
    <${PageTitle}>Deliveries<//>
    <form class="filters" aria-label="Filter deliveries" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="delivery-status" label="Status" any=${null} value=${status} options=${['failed', 'pending', 'succeeded']} onChange=${(v) => navigate('/ops/deliveries', { status: v })} />
      <button type="button" onClick=${() => list.reload(false)}>Refresh</button>
    </form>
    <${ErrorBox} error=${action.error} />
    ${action.done ? html`<${Notice}>Delivery ${action.done.id} is pending again.<//>` : null}
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="deliveries" />` : null}
    ${list.data ? html`
      <${Table} label="Deliveries" head=${['Delivery', 'Event', 'Endpoint', 'Account', 'Attempts', 'Last error', 'Updated', '']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="8" class="muted">No ${status} deliveries.</td></tr>` : null}
        ${list.data.data.map((d) => html`<tr>
          <td><code>${d.id}</code></td><td><code>${d.event_id}</code></td><td><code>${d.endpoint_id}</code></td><td><code>${d.account_id}</code></td>
          <td>${d.attempts}</td><td class="clip">${d.last_error || '–'}</td><td><${Time} at=${d.updated_at} /></td>
          <td>${status === 'failed' ? html`<button type="button" disabled=${action.busy} aria-label=${`Retry ${d.id}`} onClick=${() => retry(d.id)}>Retry</button>` : null}</td>
        </tr>`)}
      <//>
      <${Pager} base="/ops/deliveries" query=${{ ...query, status }} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

export function AccountsPage({ query }) {
  const { cursor } = query;
  const list = useLoad(() => api.listAccounts({ cursor, limit: 20 }), `accounts|${cursor}`);
  const [name, setName] = useState('');
  const [account, runAccount] = useAction();
  const [number, setNumber] = useState({ account_id: '', phone_number: '', targets: '', timeout: '', carrier: '' });
  const [assigned, runNumber] = useAction();
  const createAccount = async (e) => {
    e.preventDefault();
    const created = await runAccount(() => api.createAccount(name.trim()));
    if (created) {
      setNumber((n) => ({ ...n, account_id: created.id }));
      list.reload(true);
    }
  };
  const assign = (e) => {
    e.preventDefault();
    const ring_targets = number.targets.split(/[\s,]+/).filter(Boolean);
    const body = { account_id: number.account_id.trim(), phone_number: number.phone_number.trim(), ring_targets };
    if (number.timeout) body.ring_timeout_secs = Number(number.timeout);
    if (number.carrier) body.carrier = number.carrier;
    runNumber(() => api.assignNumber(body))
      .then((done) => done && list.reload(true));
  };
  const setN = (field) => (e) => setNumber({ ...number, [field]: e.currentTarget.value });
  return html`<section>
    <${PageTitle}>Accounts and numbers<//>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="accounts" />` : null}
    ${list.data ? html`
      <${Table} label="Accounts" head=${['Account', 'Name', 'Numbers', 'Created', '']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="5" class="muted">No accounts yet.</td></tr>` : null}
        ${list.data.data.map((a) => html`<tr>
          <td><code>${a.id}</code></td><td>${a.name || '–'}</td>
          <td>${a.numbers.length ? a.numbers.join(', ') : html`<span class="muted">none</span>`}</td>
          <td><${Time} at=${a.created_at} /></td>
          <td><button type="button" aria-label=${`Assign a number to ${a.id}`} onClick=${() => setNumber((n) => ({ ...n, account_id: a.id }))}>Assign a number</button></td>
        </tr>`)}
      <//>
      <${Pager} base="/ops/accounts" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
    <h2>Create an account</h2>
    <form class="row" onSubmit=${createAccount}>
      <div class="field"><label for="account-name">Name</label><input id="account-name" maxlength="200" value=${name} onInput=${(e) => setName(e.currentTarget.value)} /></div>
      <div><button class="primary" type="submit" disabled=${account.busy}>Create account</button></div>
    </form>
    <${ErrorBox} error=${account.error} />
    ${account.done ? html`<div class="secret" role="status"><${Facts} rows=${[['Account', html`<code class="id">${account.done.id}</code>`], ['API key (shown once)', html`<code class="id">${account.done.api_key}</code>`]]} /></div>` : null}
    <h2>Assign a number</h2>
    <form class="stack" onSubmit=${assign}>
      <div class="row">
        <div class="field"><label for="number-account">Account id</label><input id="number-account" required autocomplete="off" value=${number.account_id} onInput=${setN('account_id')} /></div>
        <div class="field"><label for="number-phone">Phone number</label><input id="number-phone" required inputmode="tel" placeholder="+15550002222" value=${number.phone_number} onInput=${setN('phone_number')} /></div>
      </div>
      <div class="field"><label for="number-targets">Ring targets, in order (optional; spaces or commas between)</label><input id="number-targets" autocomplete="off" value=${number.targets} onInput=${setN('targets')} /></div>
      <div class="row">
        <div class="field"><label for="number-timeout">Ring timeout per target, seconds (5 to 120; default 30)</label><input id="number-timeout" type="number" min="5" max="120" inputmode="numeric" value=${number.timeout} onInput=${setN('timeout')} /></div>
        <${Select} id="number-carrier" label="Carrier (default: the one its first message comes from)" any="Learn from its messages" value=${number.carrier} options=${['telnyx', 'twilio', 'plivo']} onChange=${(v) => setNumber({ ...number, carrier: v })} />
      </div>
      <${ErrorBox} error=${assigned.error} />
      ${assigned.done ? html`<${Notice}>${assigned.done.phone_number} now belongs to ${assigned.done.account_id}.<//>` : null}
      <div><button class="primary" type="submit" disabled=${assigned.busy}>Assign number</button></div>
    </form>
  </section>`;
}
