// Calls: the list, and one call's sequential ring drawn as a timeline.
import * as api from './client.ts';
import { Badge, ErrorBox, Facts, Json, Loading, PageTitle, Pager, Select, Table, Time, Timeline, html, useInterval, useLoad } from './ui.js';
import { navigate } from './router.js';
import { eventsAbout, tone } from './messages.js';

const STATUSES = ['ringing', 'in_progress', 'completed', 'missed'];

export function CallsPage({ query }) {
  const { status, cursor } = query;
  const list = useLoad(() => api.listCalls({ status, cursor, limit: 20 }), `${status}|${cursor}`);
  return html`<section>
    <${PageTitle}>Calls<//>
    <form class="filters" aria-label="Filter calls" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="call-status" label="Status" value=${status} options=${STATUSES} onChange=${(v) => navigate('/calls', { status: v })} />
      <button type="button" onClick=${() => list.reload(false)}>Refresh</button>
    </form>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="calls" />` : null}
    ${list.data ? html`
      <${Table} label="Calls" head=${['Call', 'Status', 'From → To', 'Legs', 'Duration', 'Billed', 'Started']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="7" class="muted">No calls match.</td></tr>` : null}
        ${list.data.data.map((c) => html`<tr>
          <td><a href=${`#/calls/${encodeURIComponent(c.id)}`}>${c.id}</a></td>
          <td><${Badge} value=${c.status} /></td>
          <td class="nowrap">${c.from} → ${c.to}</td>
          <td>${c.legs.length}</td>
          <td>${c.duration_secs ?? '–'}${c.duration_secs != null ? ' s' : ''}</td>
          <td>${c.billed_minutes ?? '–'}${c.billed_minutes != null ? ' min' : ''}</td>
          <td><${Time} at=${c.created_at} /></td>
        </tr>`)}
      <//>
      <${Pager} base="/calls" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

export function CallPage({ id }) {
  const detail = useLoad(async () => {
    const call = await api.getCall(id);
    const about = await eventsAbout(call.id);
    return { call, about };
  }, id);
  const call = detail.data && detail.data.call;
  useInterval(() => detail.reload(true), 2000, Boolean(call) && (call.status === 'ringing' || call.status === 'in_progress'));
  if (!call) {
    return html`<section><${PageTitle}>Call<//><${ErrorBox} error=${detail.error} />${detail.loading ? html`<${Loading} what="the call" />` : null}</section>`;
  }
  const bridged = call.legs.find((l) => l.outcome === 'answered');
  return html`<section>
    <${PageTitle}>Call <code class="id">${call.id}</code><//>
    <p class="status-line">Status <${Badge} value=${call.status} /></p>
    <${ErrorBox} error=${detail.error} />
    <${Facts} rows=${[
      ['Direction', call.direction],
      ['From', call.from],
      ['To', call.to],
      ['Answered', call.answered_at ? html`<${Time} at=${call.answered_at} />` : 'no'],
      ['Bridged to', bridged ? `target ${bridged.position}: ${bridged.target}` : 'nobody'],
      ['Duration', call.duration_secs != null ? `${call.duration_secs} s` : '–'],
      ['Billed minutes', call.billed_minutes != null ? String(call.billed_minutes) : '–'],
      ['Charge', call.charge ? html`${call.charge.quantity} minute(s), charged <${Time} at=${call.charge.charged_at} />` : 'nothing'],
    ]} />
    <h2>Sequential ring</h2>
    <${Timeline} label="Sequential ring" items=${ringItems(call, detail.data.about.events)} />
    <h2>Legs</h2>
    <${Table} label="Legs" head=${['#', 'Target', 'Outcome', 'Why it ended', 'Dialled', 'Answered', 'Ended']}>
      ${call.legs.length === 0 ? html`<tr><td colspan="7" class="muted">Nobody dialled yet.</td></tr>` : null}
      ${call.legs.map((l) => html`<tr>
        <td>${l.position}</td><td class="nowrap">${l.target}</td><td><${Badge} value=${l.outcome} /></td>
        <td>${l.hangup_cause ? l.hangup_cause.replace(/_/g, ' ') : '–'}</td>
        <td><${Time} at=${l.dialed_at} /></td><td><${Time} at=${l.answered_at} /></td><td><${Time} at=${l.ended_at} /></td>
      </tr>`)}
    <//>
    <${Json} value=${call} summary="The call as the API returns it" />
  </section>`;
}

/**
 * The ring in one clock order: the caller, each leg dialled, answered and ended, the bridge,
 * the end and the customer events, sorted by time, each saying whose clock it is (answer and end
 * times are the carrier's report; dial times and events are recorded by the platform).
 */
function ringItems(call, events) {
  const items = [{ at: call.created_at, clock: 'recorded', title: 'Caller leg', detail: `${call.from} called ${call.to}`, tone: 'info' }];
  for (const leg of call.legs) {
    const why = leg.hangup_cause ? ` (${leg.hangup_cause.replace(/_/g, ' ')})` : '';
    items.push({ at: leg.dialed_at, clock: 'recorded', title: `Target ${leg.position}: ${leg.target} dialled`, detail: `${leg.outcome.replace(/_/g, ' ')}${why}`, tone: tone(leg.outcome) });
    if (leg.answered_at) items.push({ at: leg.answered_at, clock: 'carrier', title: `Target ${leg.position} answered`, detail: leg.target, tone: 'good' });
    if (leg.outcome === 'answered' && call.answered_at) {
      items.push({ at: call.answered_at, clock: 'carrier', title: 'Bridged', detail: `caller connected to target ${leg.position}`, tone: 'good' });
    }
    if (leg.ended_at) items.push({ at: leg.ended_at, clock: 'carrier', title: `Target ${leg.position} ended`, detail: `${leg.target}${why}`, tone: tone(leg.outcome) });
  }
  if (call.ended_at) {
    const money = call.billed_minutes != null ? ` · ${call.billed_minutes} billed minute(s)` : '';
    items.push({ at: call.ended_at, clock: 'carrier', title: `Ended: ${call.status}`, detail: `${call.duration_secs != null ? `${call.duration_secs} s` : 'no talk time'}${money}`, tone: tone(call.status) });
  }
  for (const e of events) items.push({ at: e.created_at, clock: 'recorded', title: `Customer event ${e.type}`, detail: html`<a href=${`#/events/${encodeURIComponent(e.id)}`}>${e.id}</a>`, tone: 'event' });
  // One clock order: by time, whoever's clock it is (each entry says whose); a time not known
  // yet goes last; equal times keep the order above (the stable sort).
  const when = (item) => (item.at ? Date.parse(item.at) : Infinity);
  return items.map((item, i) => ({ item, i })).sort((a, b) => when(a.item) - when(b.item) || a.i - b.i).map(({ item }) => item);
}
