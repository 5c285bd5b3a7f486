// Verifies recorded webhook deliveries with the official Standard Webhooks library.
// Usage: node tests/verify_standard_webhooks.mjs FILE, where FILE is JSON:
//   {"secret": "whsec_...", "deliveries": [{"headers": {...}, "body": "...", "at": 1700000000?}]}
// or "secrets": [...] instead of "secret": a delivery verifies under any of them (an endpoint's
// secret and the one it rotated away from). A delivery with "at" (Unix seconds) is verified as
// of that time, when it arrived, so the library's 5-minute timestamp check still applies.
// Prints one line per delivery ("ok <webhook-id>") and exits 1 if any fails to verify.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const webhooks = (input.secrets ?? [input.secret]).map((s) => new Webhook(s));
const clock = Date.now;
let failed = 0;
for (const d of input.deliveries) {
  Date.now = d.at === undefined ? clock : () => d.at * 1000;
  const errors = [];
  let payload;
  for (const webhook of webhooks) {
    try {
      payload = webhook.verify(d.body, d.headers);
      break;
    } catch (e) {
      errors.push(e.message);
    }
  }
  if (payload) {
    console.log(`ok ${d.headers["webhook-id"]} ${payload.type}`);
  } else {
    failed += 1;
    console.log(`FAILED ${d.headers["webhook-id"]}: ${errors.join("; ")}`);
  }
}
Date.now = clock;
process.exit(failed ? 1 : 0);
