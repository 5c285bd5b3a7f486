// The console's session and the API's errors. Calls go through the generated client
// (client.ts). The token lives in sessionStorage (this tab, until it closes or the user signs
// out), never in a URL or a cookie.

const STORAGE_KEY = 'exactly.console.session';

/** The portal session's id when the page is a portal link (`/portal/<id>`), else null. */
export function portalId() {
  const match = /^\/portal\/(ps_[A-Za-z0-9_-]+)$/.exec(location.pathname);
  return match ? match[1] : null;
}

/**
 * A portal link carries its secret in the fragment (`#<secret>`), which no server sees: it is
 * taken into this tab's storage and the fragment replaced by the console's first route, so the
 * secret leaves the address bar and its history entry.
 */
export function takePortalSecret() {
  const id = portalId();
  const secret = location.hash.replace(/^#/, '');
  if (id && /^[A-Za-z0-9_-]{16,}$/.test(secret)) {
    saveSession({ token: `${id}.${secret}`, role: 'portal' });
    history.replaceState(null, '', `${location.pathname}#/endpoints`);
  }
}

const ROLES = ['customer', 'operator', 'portal'];

/** The signed-in session, `{ token, role: 'customer' | 'operator' | 'portal' }`, or null. */
export function currentSession() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || 'null');
    const valid = saved && typeof saved.token === 'string' && ROLES.includes(saved.role);
    // A portal page only ever uses its own session, and a console page never a portal's.
    const id = portalId();
    if (!valid || (id ? !saved.token.startsWith(`${id}.`) : saved.role === 'portal')) return null;
    return saved;
  } catch {
    return null;
  }
}

export function saveSession(session) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify(session));
}

export function clearSession() {
  sessionStorage.removeItem(STORAGE_KEY);
}

/** An error answer of the API, with its own words: `{"error": {"code", "message", "field"}}`. */
export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field || null;
  }
}

/** Every item of a paged list, following `next_cursor`, up to `max` items: `page(cursor)` asks for one page. */
export async function collect(page, max) {
  const items = [];
  let cursor;
  do {
    const answer = await page(cursor);
    items.push(...(answer.data || []));
    cursor = answer.next_cursor || undefined;
  } while (cursor && items.length < max);
  return { items: items.slice(0, max), complete: !cursor };
}
