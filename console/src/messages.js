// Messages: the list with its filters and paging, sending one, and one message's story.
import { useState } from 'preact/hooks';
import { collect } from './api.js';
import * as api from './client.ts';
import {
  Badge, ErrorBox, Facts, Json, Loading, PageTitle, Pager, Select, Table, Time, Timeline, html, useAction, useInterval, useLoad,
} from './ui.js';
import { navigate } from './router.js';

const STATUSES = ['queued', 'scheduled', 'sending', 'sent', 'delivered', 'failed', 'received', 'canceled'];
const SETTLED = new Set(['delivered', 'failed', 'received', 'canceled']);

export function MessagesPage({ query }) {
  const { status, direction, cursor } = query;
  const list = useLoad(() => api.listMessages({ status, direction, cursor, limit: 20 }), `${status}|${direction}|${cursor}`);
  const filter = (change) => navigate('/messages', { status, direction, ...change, cursor: undefined });
  return html`<section>
    <${PageTitle}>Messages<//>
    <${SendMessage} />
    <form class="filters" aria-label="Filter messages" onSubmit=${(e) => e.preventDefault()}>
      <${Select} id="message-status" label="Status" value=${status} options=${STATUSES} onChange=${(v) => filter({ status: v })} />
      <${Select} id="message-direction" label="Direction" value=${direction} options=${['inbound', 'outbound']} onChange=${(v) => filter({ direction: v })} />
      <button type="button" onClick=${() => list.reload(false)}>Refresh</button>
    </form>
    <${ErrorBox} error=${list.error} />
    ${list.loading && !list.data ? html`<${Loading} what="messages" />` : null}
    ${list.data ? html`
      <${Table} label="Messages" head=${['Message', 'Status', 'Direction', 'From → To', 'Text', 'Created']}>
        ${list.data.data.length === 0 ? html`<tr><td colspan="6" class="muted">No messages match.</td></tr>` : null}
        ${list.data.data.map((m) => html`<tr>
          <td><a href=${`#/messages/${encodeURIComponent(m.id)}`}>${m.id}</a></td>
          <td><${Badge} value=${m.status} /></td>
          <td>${m.direction}</td>
          <td class="nowrap">${m.from} → ${m.to}</td>
          <td class="clip">${m.text}</td>
          <td><${Time} at=${m.created_at} /></td>
        </tr>`)}
      <//>
      <${Pager} base="/messages" query=${query} nextCursor=${list.data.next_cursor} onRefresh=${list.reload} />` : null}
  </section>`;
}

function SendMessage() {
  const [form, setForm] = useState({ from: '', to: '', text: '', sendAt: '', key: newKey() });
  const [state, run] = useAction();
  const set = (field) => (e) => setForm({ ...form, [field]: e.currentTarget.value });
  const submit = async (e) => {
    e.preventDefault();
    const sent = await run(() => api.sendMessage(
      { from: form.from.trim(), to: form.to.trim(), text: form.text, ...(form.sendAt ? { send_at: new Date(form.sendAt).toISOString() } : {}) },
      form.key || undefined,
    ));
    if (sent) navigate(`/messages/${sent.id}`);
  };
  return html`<details class="panel">
    <summary>Send a message</summary>
    <form class="stack" onSubmit=${submit}>
      <div class="row">
        <div class="field"><label for="send-from">From (a number of this account)</label>
          <input id="send-from" required inputmode="tel" autocomplete="off" placeholder="+15550002222" value=${form.from} onInput=${set('from')} /></div>
        <div class="field"><label for="send-to">To</label>
          <input id="send-to" required inputmode="tel" autocomplete="off" placeholder="+15550003333" value=${form.to} onInput=${set('to')} /></div>
      </div>
      <div class="field"><label for="send-text">Text</label>
        <textarea id="send-text" required maxlength="1600" rows="3" value=${form.text} onInput=${set('text')}></textarea></div>
      <div class="field"><label for="send-at">Send at (optional, up to 7 days ahead)</label>
        <input id="send-at" type="datetime-local" value=${form.sendAt} onInput=${set('sendAt')} /></div>
      <div class="field"><label for="send-key">Idempotency-Key (the same key never sends twice)</label>
        <input id="send-key" autocomplete="off" value=${form.key} onInput=${set('key')} /></div>
      <${ErrorBox} error=${state.error} />
      <div><button class="primary" type="submit" disabled=${state.busy}>${state.busy ? 'Sending…' : 'Send'}</button></div>
    </form>
  </details>`;
}

function newKey() {
  return `console-${crypto.randomUUID ? crypto.randomUUID() : String(Date.now())}`;
}

/** The customer events about one resource (message or call), oldest first. */
export async function eventsAbout(resourceId) {
  const { items, complete } = await collect((cursor) => api.listEvents({ resource_id: resourceId, limit: 100, cursor }), 500);
  return { events: items.reverse(), complete };
}

export function MessagePage({ id }) {
  const detail = useLoad(async () => {
    const message = await api.getMessage(id);
    const [history, about] = await Promise.all([
      api.messageHistory(message.id),
      eventsAbout(message.id),
    ]);
    return { message, history, about };
  }, id);
  const message = detail.data && detail.data.message;
  // A message on its way is watched until it settles.
  useInterval(() => detail.reload(true), 2000, Boolean(message) && !SETTLED.has(message.status));
  if (!detail.data) {
    return html`<section><${PageTitle}>Message<//><${ErrorBox} error=${detail.error} />${detail.loading ? html`<${Loading} what="the message" />` : null}</section>`;
  }
  const { history, about } = detail.data;
  return html`<section>
    <${PageTitle}>Message <code class="id">${message.id}</code><//>
    <p class="status-line">Status <${Badge} value=${message.status} />${SETTLED.has(message.status) ? null : html` <span class="muted">(watching for changes)</span>`}</p>
    <${ErrorBox} error=${detail.error} />
    ${message.status === 'scheduled' ? html`<${CancelScheduled} message=${message} onDone=${() => detail.reload(true)} />` : null}
    <${Facts} rows=${[
      ['Direction', message.direction],
      ['From', message.from],
      ['To', message.to],
      ['Text', message.text],
      ['Segments', `${message.segments} (${message.encoding})`],
      ['Charge', chargeText(message)],
      ['Send at', message.send_at ? html`<${Time} at=${message.send_at} />` : undefined],
      ['Carrier', message.carrier ? `${message.carrier}${message.carrier_message_id ? ` · ${message.carrier_message_id}` : ''}` : undefined],
      ['Error', message.error ? `${message.error.code}${message.error.title ? `: ${message.error.title}` : ''}` : undefined],
    ]} />
    <h2>History</h2>
    <${Timeline} label="Status history" items=${historyItems(message, history.data)} />
    <h2>Customer events</h2>
    ${about.events.length === 0 ? html`<p class="muted">No customer events for this message${about.complete ? '' : ' among the latest 500'}.</p>` : html`
      <ul class="plain">${about.events.map((e) => html`<li><a href=${`#/events/${encodeURIComponent(e.id)}`}>${e.type}</a> · <${Time} at=${e.created_at} /></li>`)}</ul>`}
    <${Json} value=${message} summary="The message as the API returns it" />
  </section>`;
}

/** Cancels a scheduled message; the API answers 409 once it is on its way, shown as it words it. */
function CancelScheduled({ message, onDone }) {
  const [state, run] = useAction();
  const cancel = async () => {
    if (await run(() => api.cancelMessage(message.id))) onDone();
  };
  return html`<div class="actions" role="group" aria-label="Scheduled message">
    <button type="button" class="danger" disabled=${state.busy} onClick=${cancel}>Cancel the scheduled send</button>
    <${ErrorBox} error=${state.error} />
  </div>`;
}

function chargeText(message) {
  const { charge } = message;
  if (charge) return html`${charge.quantity} ${charge.kind === 'sms_segments' ? 'segment(s)' : 'minute(s)'}, charged <${Time} at=${charge.charged_at} />`;
  if (message.direction === 'outbound' && !['failed', 'canceled'].includes(message.status)) return 'nothing yet (charged when the carrier accepts it)';
  return 'nothing';
}

/** The timeline: the message's creation, then every status it moved to, as the API keeps them. */
function historyItems(message, steps) {
  const items = [{ at: message.created_at, title: message.direction === 'inbound' ? 'received' : 'queued', detail: message.direction === 'inbound' ? `from ${message.from}` : 'accepted by the API', tone: 'info' }];
  for (const h of steps) items.push({ at: h.at, title: h.status, detail: h.carrier_status ? `carrier: ${h.carrier_status}` : undefined, tone: tone(h.status) });
  return items;
}

function tone(status) {
  if (status === 'delivered' || status === 'received' || status === 'completed' || status === 'succeeded' || status === 'answered') return 'good';
  if (status === 'failed' || status === 'missed' || status === 'no_answer' || status === 'canceled') return 'bad';
  return 'info';
}
export { tone };
