// Usage: what the account was charged, per day for the last 14 days (UTC), from `/v1/usage`
// asked once per day, and the total.
import * as api from './client.ts';
import { ErrorBox, Loading, PageTitle, Table, html, useLoad } from './ui.js';

const DAYS = 14;

export function UsagePage() {
  const usage = useLoad(async () => {
    const today = new Date();
    today.setUTCHours(0, 0, 0, 0);
    const days = [...Array(DAYS).keys()].map((i) => new Date(today.getTime() - i * 86_400_000));
    const rows = await Promise.all(days.map(async (day) => {
      const to = new Date(day.getTime() + 86_400_000);
      const u = await api.getUsage({ from: day.toISOString(), to: to.toISOString() });
      return { day: day.toISOString().slice(0, 10), ...u };
    }));
    return rows;
  }, 'usage');
  const total = (key) => (usage.data || []).reduce((n, r) => n + r[key], 0);
  return html`<section>
    <${PageTitle}>Usage<//>
    <${ErrorBox} error=${usage.error} />
    ${usage.loading && !usage.data ? html`<${Loading} what="usage" />` : null}
    ${usage.data ? html`
      <p>Last ${DAYS} days: <strong>${total('sms_segments')}</strong> SMS segments, <strong>${total('mms')}</strong> MMS, <strong>${total('call_minutes')}</strong> call minutes.</p>
      <${Table} label="Usage per day" head=${['Day (UTC)', 'SMS segments', 'MMS', 'Call minutes']}>
        ${usage.data.map((r) => html`<tr><td class="nowrap">${r.day}</td><td>${r.sms_segments}</td><td>${r.mms}</td><td>${r.call_minutes}</td></tr>`)}
      <//>
      <button type="button" onClick=${() => usage.reload(true)}>Refresh</button>` : null}
  </section>`;
}
