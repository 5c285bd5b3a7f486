// The event catalog (`GET /v1/event_types`): every event type with what it means, whether an
// endpoint may subscribe to it, and an example body; a test send delivers any of those examples.
import * as api from './client.ts';
import { Badge, ErrorBox, Json, Loading, PageTitle, Table, html, useLoad } from './ui.js';

export function EventTypesPage() {
  const catalog = useLoad(() => api.listEventTypes(), 'catalog');
  return html`<section>
    <${PageTitle}>Event types<//>
    <p class="muted">What each webhook means and an example of its body. Any type can be sent to an endpoint as a test from the endpoint's page.</p>
    <${ErrorBox} error=${catalog.error} />
    ${catalog.loading && !catalog.data ? html`<${Loading} what="the event types" />` : null}
    ${catalog.data ? html`
      <${Table} label="Event types" head=${['Type', 'Subscribe', 'What it means', 'Example']}>
        ${catalog.data.data.map((t) => html`<tr>
          <td><code>${t.type}</code></td>
          <td><${Badge} value=${t.subscribable ? 'yes' : 'no'} /></td>
          <td><strong>${t.summary}</strong><br /><span class="small">${t.description}</span></td>
          <td><${Json} value=${t.example} summary="Example body" /></td>
        </tr>`)}
      <//>` : null}
  </section>`;
}
