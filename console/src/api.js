// The console's only way to the worker: the public API (`/v1`, `/admin`) with a bearer token,
// exactly as `curl` calls it. The token lives in sessionStorage (this tab, until it closes or
// the user signs out), never in a URL or a cookie.

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

/**
 * Calls the API. `token` overrides the session's (sign-in uses it before a session exists).
 * Resolves to the parsed JSON body (null for an empty one); rejects with an ApiError.
 */
export async function api(method, path, { body, headers = {}, token, raw = false } = {}) {
  const bearer = token ?? currentSession()?.token;
  const init = { method, headers: { ...headers }, cache: 'no-store', credentials: 'omit' };
  if (bearer) init.headers.authorization = `Bearer ${bearer}`;
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError(0, 'network', `The worker did not answer (${e.message}).`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (!response.ok) {
    const error = json && json.error;
    throw new ApiError(
      response.status,
      (error && error.code) || `http_${response.status}`,
      (error && error.message) || text.slice(0, 300) || response.statusText || `HTTP ${response.status}`,
      error && error.field,
    );
  }
  return raw ? text : json;
}

/** Builds `path?query` from an object, leaving out empty values. */
export function withQuery(path, params) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '') query.set(key, String(value));
  }
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/** Every item of a paged list, following `next_cursor`, up to `max` items. */
export async function collect(path, params, max) {
  const items = [];
  let cursor = null;
  do {
    const page = await api('GET', withQuery(path, { ...params, limit: 100, cursor }));
    items.push(...(page.data || []));
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return { items: items.slice(0, max), complete: !cursor };
}
