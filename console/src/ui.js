// Shared pieces: the htm binding, a loader hook, and small accessible components.
import { h } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);

/** Runs `load` when `key` changes; `reload` runs it again. Errors are kept as the API gave them. */
export function useLoad(load, key) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const generation = useRef(0);
  const run = useCallback(async (quiet) => {
    const mine = ++generation.current;
    if (!quiet) setState((s) => ({ ...s, loading: true }));
    try {
      const data = await load();
      if (mine === generation.current) setState({ data, error: null, loading: false });
    } catch (error) {
      if (mine === generation.current) setState((s) => ({ data: s.data, error, loading: false }));
    }
  }, [key]);
  useEffect(() => {
    setState({ data: null, error: null, loading: true });
    run(false);
    return () => { generation.current++; };
  }, [run]);
  return { ...state, reload: run };
}

/** Calls `tick` every `ms` while `active`. */
export function useInterval(tick, ms, active) {
  const saved = useRef(tick);
  saved.current = tick;
  useEffect(() => {
    if (!active) return undefined;
    const id = setInterval(() => saved.current(), ms);
    return () => clearInterval(id);
  }, [ms, active]);
}

/** An action button's state: busy while it runs, then the API's answer or error. */
export function useAction() {
  const [state, setState] = useState({ busy: false, error: null, done: null });
  const run = useCallback(async (action) => {
    setState({ busy: true, error: null, done: null });
    try {
      const done = await action();
      setState({ busy: false, error: null, done: done ?? true });
      return done;
    } catch (error) {
      setState({ busy: false, error, done: null });
      return undefined;
    }
  }, []);
  return [state, run];
}

/** The API's words for an error, announced to screen readers. */
export function ErrorBox({ error }) {
  if (!error) return null;
  const code = error.code ? html`<code>${error.code}</code>` : null;
  const status = error.status ? ` (HTTP ${error.status})` : '';
  return html`<p class="error" role="alert">${error.message}${status} ${code}</p>`;
}

export function Notice({ children }) {
  return html`<p class="notice" role="status">${children}</p>`;
}

export function Loading({ what }) {
  return html`<p class="muted" role="status">Loading ${what}…</p>`;
}

export function Badge({ value }) {
  if (value === null || value === undefined) return html`<span class="muted">–</span>`;
  return html`<span class=${`badge badge-${String(value).replace(/[^a-z_]/g, '')}`}>${String(value).replace(/_/g, ' ')}</span>`;
}

/** A time as the browser's local time, with the exact ISO value underneath. */
export function Time({ at }) {
  if (!at) return html`<span class="muted">–</span>`;
  const date = new Date(at);
  if (Number.isNaN(date.getTime())) return html`<span>${at}</span>`;
  return html`<time datetime=${at} title=${at}>${date.toLocaleString()}</time>`;
}

export function ago(at) {
  const seconds = Math.max(0, Math.round((Date.now() - new Date(at).getTime()) / 1000));
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${Math.round(seconds / 3600)} h`;
  return `${Math.round(seconds / 86400)} d`;
}

/** A page heading that takes focus when the page opens, so keyboard and screen-reader users land on it. */
export function PageTitle({ children }) {
  const ref = useRef(null);
  useEffect(() => { ref.current && ref.current.focus(); }, []);
  return html`<h1 tabindex="-1" ref=${ref}>${children}</h1>`;
}

/** A wide table that scrolls sideways inside itself on a narrow screen. */
export function Table({ label, head, children }) {
  return html`<div class="table-wrap" role="region" aria-label=${label} tabindex="0">
    <table>
      <caption class="visually-hidden">${label}</caption>
      <thead><tr>${head.map((c) => html`<th scope="col">${c}</th>`)}</tr></thead>
      <tbody>${children}</tbody>
    </table>
  </div>`;
}

/** Term/definition pairs; rows whose value is undefined are left out. */
export function Facts({ rows }) {
  return html`<dl class="facts">${rows.filter(([, v]) => v !== undefined).map(([k, v]) => html`<div><dt>${k}</dt><dd>${v}</dd></div>`)}</dl>`;
}

/** An ordered timeline: `{ at, title, detail, tone }` items, oldest first. */
export function Timeline({ label, items }) {
  return html`<ol class="timeline" aria-label=${label}>
    ${items.map((item) => html`<li class=${`tl tl-${item.tone || 'info'}`}>
      <div class="tl-head"><strong>${item.title}</strong> ${item.at ? html`<${Time} at=${item.at} />` : null}
        ${item.clock ? html`<span class="muted small"> (${item.clock === 'carrier' ? 'carrier reported' : 'recorded'})</span>` : null}</div>
      ${item.detail ? html`<div class="tl-detail">${item.detail}</div>` : null}
    </li>`)}
  </ol>`;
}

/**
 * Cursor paging both ways: "Next page" carries the trail of the cursors that led here
 * (`trail`, comma-separated; a cursor has no comma), so "Previous page" can go back one.
 */
export function Pager({ nextCursor, query, base, onRefresh }) {
  const trail = query.trail ? query.trail.split(',') : [];
  const first = { ...query, cursor: undefined, trail: undefined };
  const next = { ...query, cursor: nextCursor, trail: [...trail, query.cursor || ''].join(',') };
  const previous = { ...query, cursor: trail[trail.length - 1] || undefined, trail: trail.slice(0, -1).join(',') || undefined };
  return html`<nav class="pager" aria-label="Pages">
    ${query.cursor ? html`<a href=${hashOf(base, first)}>« First page</a>` : null}
    ${query.cursor ? html`<a href=${hashOf(base, previous)}>‹ Previous page</a>` : null}
    ${nextCursor ? html`<a href=${hashOf(base, next)}>Next page »</a>` : html`<span class="muted">End of list</span>`}
    ${onRefresh ? html`<button type="button" onClick=${() => onRefresh(true)}>Refresh</button>` : null}
  </nav>`;
}

export function hashOf(base, query) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query || {})) if (v) params.set(k, v);
  const text = params.toString();
  return `#${base}${text ? `?${text}` : ''}`;
}

export function Json({ value, summary }) {
  return html`<details class="json"><summary>${summary}</summary><pre>${JSON.stringify(value, null, 2)}</pre></details>`;
}

/** A select whose empty option means "any". */
export function Select({ id, label, value, options, onChange, any = 'Any' }) {
  return html`<div class="field">
    <label for=${id}>${label}</label>
    <select id=${id} value=${value || ''} onChange=${(e) => onChange(e.currentTarget.value)}>
      ${any !== null ? html`<option value="">${any}</option>` : null}
      ${options.map((o) => html`<option value=${o}>${o.replace(/_/g, ' ')}</option>`)}
    </select>
  </div>`;
}

export const EVENT_TYPES = [
  'message.received', 'message.sent', 'message.delivered', 'message.failed',
  'call.initiated', 'call.answered', 'call.completed', 'call.missed',
  'endpoint.disabled', 'delivery.exhausted', 'backlog.high', 'endpoint.circuit_opened', 'endpoint.circuit_closed',
];
