// The typed TypeScript client of the exactly API: `schema.d.ts` is generated from
// docs/openapi.json by openapi-typescript (`make check` regenerates it and fails on any
// difference), and openapi-fetch turns it into calls whose paths, parameters, bodies and answers
// are checked by the compiler. The console (console/src/client.ts) is its first user.
import createClient, { type Client, type ClientOptions } from "openapi-fetch";
import type { paths } from "./schema.js";

export type { components, operations, paths, webhooks } from "./schema.js";

/** A client of one worker: every path of the API, typed. */
export type Exactly = Client<paths>;

/**
 * Where a client keeps the D1 bookmark of its `/v1` session (docs/contract.md §5, "Read
 * replication"): the last `x-d1-bookmark` an answer carried, sent back with the next request, so
 * a read never misses the client's own writes when the database has read replicas. Share one
 * between clients to share their session.
 */
export interface BookmarkStore {
  bookmark?: string;
}

/** Options: openapi-fetch's (`baseUrl`, `fetch`, `headers`, ...), the bearer `token`, and the bookmark's store. */
export type ExactlyOptions = ClientOptions & {
  /** An account's API key (`/v1`) or the admin token (`/admin`). */
  token?: string;
  /** Where the `/v1` session's bookmark is kept (default: a store of this client's own). */
  bookmarks?: BookmarkStore;
};

/** The header that carries a `/v1` session's bookmark, both ways. */
export const BOOKMARK_HEADER = "x-d1-bookmark";

/** A client of the worker at `baseUrl` (the page's origin when left out, in a browser). */
export function createExactlyClient(options: ExactlyOptions = {}): Exactly {
  const { token, headers, bookmarks = {}, ...rest } = options;
  // Any form of headers openapi-fetch takes (an object, a Headers, pairs); the token's last.
  const merged = new Headers(headers as HeadersInit | undefined);
  if (token) merged.set("authorization", `Bearer ${token}`);
  const client = createClient<paths>({ ...rest, headers: Object.fromEntries(merged.entries()) });
  // Only `/v1` runs in a session; the bookmark goes back with every `/v1` request after the first.
  const sessioned = (url: string) => new URL(url).pathname.startsWith("/v1/");
  client.use({
    onRequest({ request }) {
      if (bookmarks.bookmark && sessioned(request.url)) request.headers.set(BOOKMARK_HEADER, bookmarks.bookmark);
      return request;
    },
    onResponse({ request, response }) {
      const bookmark = response.headers.get(BOOKMARK_HEADER);
      if (bookmark && sessioned(request.url)) bookmarks.bookmark = bookmark;
      return response;
    },
  });
  return client;
}
