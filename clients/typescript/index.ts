// The typed TypeScript client of the exactly API: `schema.d.ts` is generated from
// docs/openapi.json by openapi-typescript (`make check` regenerates it and fails on any
// difference), and openapi-fetch turns it into calls whose paths, parameters, bodies and answers
// are checked by the compiler. The console (console/src/client.ts) is its first user.
import createClient, { type Client, type ClientOptions } from "openapi-fetch";
import type { paths } from "./schema";

export type { components, operations, paths, webhooks } from "./schema";

/** A client of one worker: every path of the API, typed. */
export type Exactly = Client<paths>;

/** Options: openapi-fetch's (`baseUrl`, `fetch`, `headers`, ...) and the bearer `token`. */
export type ExactlyOptions = ClientOptions & {
  /** An account's API key (`/v1`) or the admin token (`/admin`). */
  token?: string;
};

/** A client of the worker at `baseUrl` (the page's origin when left out, in a browser). */
export function createExactlyClient(options: ExactlyOptions = {}): Exactly {
  const { token, headers, ...rest } = options;
  // Any form of headers openapi-fetch takes (an object, a Headers, pairs); the token's last.
  const merged = new Headers(headers as HeadersInit | undefined);
  if (token) merged.set("authorization", `Bearer ${token}`);
  return createClient<paths>({ ...rest, headers: Object.fromEntries(merged.entries()) });
}
