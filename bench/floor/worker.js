// The floor: the same D1 insert (+ read-back) and queue send as the product's ingest, with no
// verification and no parsing. Nothing can be faster and still store-once-and-enqueue, so the
// product's ingest is measured against this.
import { ingest } from "./ingest.js";

export default { fetch: ingest };
