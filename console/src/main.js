// The console's shell: sign-in, navigation and the routes of each role.
import { render } from 'preact';
import { useState } from 'preact/hooks';
import { ApiError, clearSession, currentSession, portalId, saveSession, takePortalSecret } from './api.js';
import * as api from './client.ts';
import { ErrorBox, Loading, PageTitle, html, useLoad } from './ui.js';
import { useRoute } from './router.js';
import { MessagePage, MessagesPage } from './messages.js';
import { CallPage, CallsPage } from './calls.js';
import { EventPage, EventsPage } from './events.js';
import { EndpointPage, EndpointsPage } from './endpoints.js';
import { EventTypesPage } from './catalog.js';
import { UsagePage } from './usage.js';
import { KeysPage } from './keys.js';
import { AccountsPage, CarrierEventsPage, DeliveriesPage, OverviewPage } from './operator.js';

const NAV = {
  customer: [['/messages', 'Messages'], ['/calls', 'Calls'], ['/events', 'Events'], ['/endpoints', 'Endpoints'], ['/event-types', 'Event types'], ['/usage', 'Usage'], ['/keys', 'Access']],
  portal: [['/endpoints', 'Endpoints'], ['/event-types', 'Event types']],
  operator: [['/ops', 'Overview'], ['/ops/carrier-events', 'Carrier events'], ['/ops/deliveries', 'Deliveries'], ['/ops/accounts', 'Accounts']],
};

/**
 * Which kind of token this is, asked of the API itself: the admin token opens `/admin`, an API
 * key opens `/v1`. Anything else is refused with the API's own error.
 */
async function signIn(token) {
  try {
    await api.probeAdmin(token);
    return 'operator';
  } catch (e) {
    if (!(e instanceof ApiError) || e.status !== 401) throw e;
  }
  await api.probeAccount(token);
  return 'customer';
}

function SignIn({ onSignedIn }) {
  const [token, setToken] = useState('');
  const [state, setState] = useState({ busy: false, error: null });
  const submit = async (e) => {
    e.preventDefault();
    setState({ busy: true, error: null });
    try {
      const role = await signIn(token.trim());
      const session = { token: token.trim(), role };
      saveSession(session);
      onSignedIn(session);
    } catch (error) {
      setState({ busy: false, error });
    }
  };
  return html`<main id="main" class="signin">
    <${PageTitle}>Sign in to exactly<//>
    <form class="stack" onSubmit=${submit}>
      <div class="field">
        <label for="token">API key or admin token</label>
        <input id="token" type="password" required autocomplete="off" spellcheck="false" value=${token} onInput=${(e) => setToken(e.currentTarget.value)} />
      </div>
      <p class="muted small">An API key (<code>sk_…</code>) opens your account's messages, calls, events and endpoints; the admin token opens the operator's pages. It is kept in this tab only, until you sign out or close it.</p>
      <${ErrorBox} error=${state.error} />
      <div><button class="primary" type="submit" disabled=${state.busy}>${state.busy ? 'Signing in…' : 'Sign in'}</button></div>
    </form>
  </main>`;
}

function page(role, route, access) {
  const [first, second, third] = route.segments;
  const { query } = route;
  if (role === 'portal') {
    if (first === 'endpoints' || !first) return second ? html`<${EndpointPage} id=${second} key=${second} access=${access} />` : html`<${EndpointsPage} query=${query} access=${access} />`;
    if (first === 'event-types') return html`<${EventTypesPage} />`;
    if (first === 'events' && access && !access.endpoint_ids) return second ? html`<${EventPage} id=${second} key=${second} />` : html`<${EventsPage} query=${query} />`;
  } else if (role === 'customer') {
    if (first === 'messages') return second ? html`<${MessagePage} id=${second} key=${second} />` : html`<${MessagesPage} query=${query} />`;
    if (first === 'calls') return second ? html`<${CallPage} id=${second} key=${second} />` : html`<${CallsPage} query=${query} />`;
    if (first === 'events') return second ? html`<${EventPage} id=${second} key=${second} />` : html`<${EventsPage} query=${query} />`;
    if (first === 'event-types') return html`<${EventTypesPage} />`;
    if (first === 'usage') return html`<${UsagePage} />`;
    if (first === 'keys') return html`<${KeysPage} query=${query} />`;
    if (first === 'endpoints') return second ? html`<${EndpointPage} id=${second} key=${second} />` : html`<${EndpointsPage} query=${query} />`;
    if (!first) return html`<${MessagesPage} query=${query} />`;
  } else {
    if (first === 'ops' && second === 'carrier-events') return html`<${CarrierEventsPage} query=${query} />`;
    if (first === 'ops' && second === 'deliveries') return html`<${DeliveriesPage} query=${query} />`;
    if (first === 'ops' && second === 'accounts') return html`<${AccountsPage} query=${query} />`;
    if ((first === 'ops' && !third) || !first) return html`<${OverviewPage} />`;
  }
  return html`<section><${PageTitle}>Not here<//><p>This page is not part of the ${role}'s console. <a href="#/">Go to the start</a>.</p></section>`;
}

/** A portal link's page: the account's webhook portal, with what its session allows. */
function Portal({ session, route }) {
  const account = useLoad(() => api.getAccount(), session.token);
  if (!account.data) {
    return html`<main id="main" class="signin"><${PageTitle}>Webhook portal<//><${ErrorBox} error=${account.error} />${account.loading ? html`<${Loading} what="the portal" />` : null}</main>`;
  }
  const { access } = account.data;
  const nav = access.endpoint_ids ? NAV.portal : [...NAV.portal, ['/events', 'Events']];
  const active = (path) => route.path === path || route.path.startsWith(`${path}/`) || (route.path === '/' && path === nav[0][0]);
  return html`<div class="shell">
    <header class="top">
      <span class="brand">Webhooks <span class="role">${access.read_only ? 'read-only' : 'portal'}</span></span>
      <nav aria-label="Main">
        <ul>${nav.map(([path, label]) => html`<li><a href=${`#${path}`} aria-current=${active(path) ? 'page' : undefined}>${label}</a></li>`)}</ul>
      </nav>
    </header>
    <main id="main" tabindex="-1" key=${route.path}>${page('portal', route, access)}</main>
  </div>`;
}

function App() {
  const [session, setSession] = useState(currentSession);
  const route = useRoute();
  if (portalId()) {
    if (!session) {
      return html`<main id="main" class="signin"><${PageTitle}>Webhook portal<//><p>This link has no key of its own: open the whole link you were given, or ask for a new one.</p></main>`;
    }
    return html`<${Portal} session=${session} route=${route} />`;
  }
  if (!session) return html`<${SignIn} onSignedIn=${(s) => { setSession(s); location.hash = '#/'; }} />`;
  const signOut = () => {
    clearSession();
    setSession(null);
    location.hash = '';
  };
  const nav = NAV[session.role];
  const active = (path) => route.path === path || (path !== '/ops' && route.path.startsWith(`${path}/`)) || (route.path === '/' && path === nav[0][0]);
  return html`<div class="shell">
    <a class="skip" href="#main" onClick=${(e) => { e.preventDefault(); document.getElementById('main').focus(); }}>Skip to content</a>
    <header class="top">
      <span class="brand">exactly <span class="role">${session.role === 'operator' ? 'operator' : 'account'}</span></span>
      <nav aria-label="Main">
        <ul>${nav.map(([path, label]) => html`<li><a href=${`#${path}`} aria-current=${active(path) ? 'page' : undefined}>${label}</a></li>`)}</ul>
      </nav>
      <button type="button" class="signout" onClick=${signOut}>Sign out</button>
    </header>
    <main id="main" tabindex="-1" key=${route.path}>${page(session.role, route)}</main>
  </div>`;
}

takePortalSecret();
render(html`<${App} />`, document.getElementById('app'));
