// The operator's charts, drawn as SVG from `/admin/metrics/series`: attempts by outcome, success
// rate, backlog and time-to-webhook over the last day. Each chart has a text summary beside it,
// so nothing is only in a picture.
import * as api from './client.ts';
import { ErrorBox, Loading, html, useLoad } from './ui.js';

const W = 480;
const H = 120;

function Bars({ label, data, stacks }) {
  const max = Math.max(1, ...data.map((b) => stacks.reduce((n, [key]) => n + b[key], 0)));
  const width = W / Math.max(1, data.length);
  return html`<svg class="chart" viewBox=${`0 0 ${W} ${H + 14}`} role="img" aria-label=${label}>
    <line class="axis" x1="0" y1=${H} x2=${W} y2=${H} />
    ${data.map((b, i) => {
      let y = H;
      return stacks.map(([key, cls]) => {
        const h = (b[key] / max) * H;
        y -= h;
        return h > 0 ? html`<rect class=${cls} x=${i * width + 1} y=${y} width=${Math.max(1, width - 2)} height=${h}><title>${key}: ${b[key]}</title></rect>` : null;
      });
    })}
    <text x="0" y=${H + 12}>max ${max}</text>
  </svg>`;
}

function Line({ label, values, max: fixed, unit }) {
  const known = values.filter((v) => v != null);
  const max = fixed ?? Math.max(1, ...known);
  const step = W / Math.max(1, values.length - 1);
  const points = values.map((v, i) => (v == null ? null : `${i * step},${H - (v / max) * H}`)).filter(Boolean).join(' ');
  return html`<svg class="chart" viewBox=${`0 0 ${W} ${H + 14}`} role="img" aria-label=${label}>
    <line class="axis" x1="0" y1=${H} x2=${W} y2=${H} />
    ${points ? html`<polyline class="line" points=${points} />` : null}
    <text x="0" y=${H + 12}>max ${Math.round(max * 100) / 100}${unit}</text>
  </svg>`;
}

export function Charts() {
  const series = useLoad(() => api.metricsSeries({ hours: 24, bucket_minutes: 60 }), 'series');
  if (!series.data) return html`<section><${ErrorBox} error=${series.error} />${series.loading ? html`<${Loading} what="charts" />` : null}</section>`;
  const data = series.data.data || [];
  const sum = (key) => data.reduce((n, b) => n + (b[key] || 0), 0);
  const attempts = sum('attempts');
  const rate = attempts ? Math.round((sum('succeeded') / attempts) * 1000) / 10 : null;
  const last = data[data.length - 1] || {};
  return html`<section aria-label="Charts">
    <h2>Last 24 hours</h2>
    <div class="grid2">
      <figure><figcaption>Attempts by outcome: ${sum('succeeded')} succeeded, ${sum('refused')} refused, ${sum('no_answer')} no answer</figcaption>
        <${Bars} label="Attempts by outcome per hour" data=${data} stacks=${[['succeeded', 'bar-good'], ['refused', 'bar-bad'], ['no_answer', 'bar-warn']]} /></figure>
      <figure><figcaption>Success rate: ${rate == null ? 'no attempts' : `${rate}%`}</figcaption>
        <${Line} label="Success rate per hour" values=${data.map((b) => (b.success_rate == null ? null : b.success_rate * 100))} max=${100} unit="%" /></figure>
      <figure><figcaption>Backlog: ${last.backlog ?? 0} deliveries open now</figcaption>
        <${Line} label="Open deliveries at each hour's end" values=${data.map((b) => b.backlog)} unit="" /></figure>
      <figure><figcaption>Time to webhook (first attempts, average)</figcaption>
        <${Line} label="Average time to webhook per hour" values=${data.map((b) => b.time_to_webhook_ms_avg)} unit=" ms" /></figure>
    </div>
  </section>`;
}
