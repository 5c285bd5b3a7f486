// The console's session and the API's errors. Calls go through the generated client
// (client.ts). The token lives in sessionStorage (this tab, until it closes or the user signs
// out), never in a URL or a cookie.

const STORAGE_KEY = 'exactly.console.session';

/** The signed-in session, `{ token, role: 'customer' | 'operator' }`, or null. */
export function currentSession() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || 'null');
    return saved && typeof saved.token === 'string' && (saved.role === 'customer' || saved.role === 'operator') ? saved : null;
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
