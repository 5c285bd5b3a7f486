// The console's only way to the worker: the generated, typed client of the public API
// (clients/typescript), with the session's bearer token, exactly as any client calls it. Each
// function here is one operation of docs/openapi.json; `tsc` checks every path, parameter and
// body against it (`make check`), so the console breaks at build time, not in the browser, when
// the API changes.
import { createExactlyClient, type BookmarkStore, type Exactly, type paths } from '../../clients/typescript/index';
import { ApiError, currentSession } from './api.js';

/** The console's one `/v1` session: every call sends back the bookmark the last answer gave. */
const bookmarks: BookmarkStore = {};

/** The query parameters of an operation. */
type Query<P extends keyof paths, M extends 'get' | 'post'> = NonNullable<
  NonNullable<paths[P][M]> extends { parameters: { query?: infer Q } } ? Q : never
>;
/** The JSON body of an operation. */
type Body<P extends keyof paths, M extends 'post' | 'patch'> =
  NonNullable<paths[P][M]> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

/** A client for `token` (sign-in), else for the session's. */
function client(token?: string): Exactly {
  return createExactlyClient({ token: token ?? currentSession()?.token, cache: 'no-store', credentials: 'omit', bookmarks });
}

/** An answer of openapi-fetch: the body when it succeeded, else the API's own error. */
type Answer<D> = { data?: D; error?: unknown; response: Response };

/** The answer's body, or an ApiError with the API's words (`{"error": {"code", "message", "field"}}`). */
async function unwrap<D>(call: Promise<Answer<D>>): Promise<D> {
  let answer: Answer<D>;
  try {
    answer = await call;
  } catch (e) {
    throw new ApiError(0, 'network', `The worker did not answer (${(e as Error).message}).`);
  }
  const { data, error, response } = answer;
  if (response.ok) return data as D;
  const body = (error as { error?: { code?: string; message?: string; field?: string } } | undefined)?.error;
  // An answer that is not the API's error shape (a proxy's page, say) is shown as it came.
  const raw = typeof error === 'string' ? error : error === undefined ? '' : JSON.stringify(error);
  throw new ApiError(
    response.status,
    body?.code || `http_${response.status}`,
    body?.message || raw.slice(0, 300) || response.statusText || `HTTP ${response.status}`,
    body?.field,
  );
}

const path = (id: string) => ({ params: { path: { id } } });

/** A query without its empty values (an unset filter is left out, not sent empty). */
const q = <T extends object>(query: T): T =>
  Object.fromEntries(Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== '')) as T;

// Sign-in: which kind of token this is, asked of the API itself.
export const probeAdmin = (token: string) => unwrap(client(token).GET('/admin/carrier_events', { params: { query: { limit: 1 } } }));
export const probeAccount = (token: string) => unwrap(client(token).GET('/v1/messages', { params: { query: { limit: 1 } } }));

// Messages.
export const listMessages = (query: Query<'/v1/messages', 'get'>) => unwrap(client().GET('/v1/messages', { params: { query: q(query) } }));
export const getMessage = (id: string) => unwrap(client().GET('/v1/messages/{id}', path(id)));
export const messageHistory = (id: string) => unwrap(client().GET('/v1/messages/{id}/history', path(id)));
export const cancelMessage = (id: string) => unwrap(client().POST('/v1/messages/{id}/cancel', path(id)));
export const sendMessage = (body: Body<'/v1/messages', 'post'>, idempotencyKey?: string) =>
  unwrap(client().POST('/v1/messages', { body, params: { header: idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {} } }));

// Calls.
export const listCalls = (query: Query<'/v1/calls', 'get'>) => unwrap(client().GET('/v1/calls', { params: { query: q(query) } }));
export const getCall = (id: string) => unwrap(client().GET('/v1/calls/{id}', path(id)));

// Events.
export const listEvents = (query: Query<'/v1/events', 'get'>) => unwrap(client().GET('/v1/events', { params: { query: q(query) } }));
export const getEvent = (id: string) => unwrap(client().GET('/v1/events/{id}', path(id)));
export const replayEvent = (id: string, endpointId?: string) =>
  unwrap(client().POST('/v1/events/{id}/replay', { ...path(id), body: endpointId ? { endpoint_id: endpointId } : {} }));

// Webhook endpoints.
export const listEndpoints = (query: Query<'/v1/webhook_endpoints', 'get'>) =>
  unwrap(client().GET('/v1/webhook_endpoints', { params: { query: q(query) } }));
export const createEndpoint = (body: Body<'/v1/webhook_endpoints', 'post'>) => unwrap(client().POST('/v1/webhook_endpoints', { body }));
export const getEndpoint = (id: string) => unwrap(client().GET('/v1/webhook_endpoints/{id}', path(id)));
export const updateEndpoint = (id: string, body: Body<'/v1/webhook_endpoints/{id}', 'patch'>) =>
  unwrap(client().PATCH('/v1/webhook_endpoints/{id}', { ...path(id), body }));
export const deleteEndpoint = (id: string) => unwrap(client().DELETE('/v1/webhook_endpoints/{id}', path(id)));
export const rotateSecret = (id: string) => unwrap(client().POST('/v1/webhook_endpoints/{id}/rotate_secret', path(id)));
/** `eventType`: one of `GET /v1/event_types`' names (the document's enum), or the default `endpoint.test`. */
type TestType = NonNullable<NonNullable<Body<'/v1/webhook_endpoints/{id}/test', 'post'>>['event_type']>;
export const testEndpoint = (id: string, eventType?: string) =>
  unwrap(client().POST('/v1/webhook_endpoints/{id}/test', {
    ...path(id),
    body: eventType ? { event_type: eventType as TestType } : {},
  }));
export const listEventTypes = () => unwrap(client().GET('/v1/event_types'));
export const recoverEndpoint = (id: string, since: string) =>
  unwrap(client().POST('/v1/webhook_endpoints/{id}/recover', { ...path(id), body: { since } }));

// The operator's.
export const metricsText = () => unwrap(client().GET('/admin/metrics', { parseAs: 'text' }));
export const getAudit = () => unwrap(client().GET('/admin/audit'));
export const listCarrierEvents = (query: Query<'/admin/carrier_events', 'get'>) =>
  unwrap(client().GET('/admin/carrier_events', { params: { query: q(query) } }));
export const retryCarrierEvent = (id: string) => unwrap(client().POST('/admin/carrier_events/{id}/retry', path(id)));
export const retryFailedCarrierEvents = () =>
  unwrap(client().POST('/admin/carrier_events/retry', { params: { query: { status: 'failed' } } }));
export const listDeliveries = (query: Query<'/admin/webhook_deliveries', 'get'>) =>
  unwrap(client().GET('/admin/webhook_deliveries', { params: { query: q(query) } }));
export const retryDelivery = (id: string) => unwrap(client().POST('/admin/webhook_deliveries/{id}/retry', path(id)));
export const listAccounts = (query: Query<'/admin/accounts', 'get'>) => unwrap(client().GET('/admin/accounts', { params: { query: q(query) } }));
export const createAccount = (name: string) => unwrap(client().POST('/admin/accounts', { body: { name } }));
export const assignNumber = (body: Body<'/admin/numbers', 'post'>) => unwrap(client().POST('/admin/numbers', { body }));

// The delivery log and retry-all, the account, keys and portal sessions.
export const listAttempts = (id: string, query: Query<'/v1/webhook_endpoints/{id}/attempts', 'get'>) =>
  unwrap(client().GET('/v1/webhook_endpoints/{id}/attempts', { params: { path: { id }, query: q(query) } }));
export const retryFailed = (id: string, body: Body<'/v1/webhook_endpoints/{id}/retries', 'post'>) =>
  unwrap(client().POST('/v1/webhook_endpoints/{id}/retries', { ...path(id), body }));
export const getRetry = (id: string, retryId: string) =>
  unwrap(client().GET('/v1/webhook_endpoints/{id}/retries/{retry_id}', { params: { path: { id, retry_id: retryId } } }));
export const getAccount = (token?: string) => unwrap(client(token).GET('/v1/account'));
export const metricsSeries = (query: Query<'/admin/metrics/series', 'get'>) =>
  unwrap(client().GET('/admin/metrics/series', { params: { query: q(query) } }));
export const getUsage = (query: Query<'/v1/usage', 'get'>) => unwrap(client().GET('/v1/usage', { params: { query: q(query) } }));
export const listKeys = (query: Query<'/v1/api_keys', 'get'>) => unwrap(client().GET('/v1/api_keys', { params: { query: q(query) } }));
export const createKey = (body: Body<'/v1/api_keys', 'post'>) => unwrap(client().POST('/v1/api_keys', { body }));
export const revokeKey = (id: string) => unwrap(client().DELETE('/v1/api_keys/{id}', path(id)));
export const createPortalSession = (body: Body<'/v1/portal_sessions', 'post'>) => unwrap(client().POST('/v1/portal_sessions', { body }));
export const listPortalSessions = (query: Query<'/v1/portal_sessions', 'get'>) =>
  unwrap(client().GET('/v1/portal_sessions', { params: { query: q(query) } }));
export const revokePortalSession = (id: string) => unwrap(client().DELETE('/v1/portal_sessions/{id}', path(id)));
export const updateAccount = (body: Body<'/v1/account', 'patch'>) => unwrap(client().PATCH('/v1/account', { body }));
