// Verifies recorded webhook deliveries with the official Standard Webhooks library.
// Usage: node tests/verify_standard_webhooks.mjs FILE, where FILE is JSON:
//   {"secret": "whsec_...", "deliveries": [{"headers": {...}, "body": "..."}]}
// Prints one line per delivery ("ok <webhook-id>") and exits 1 if any fails to verify.
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

const { secret, deliveries } = JSON.parse(readFileSync(process.argv[2], "utf8"));
const webhook = new Webhook(secret);
let failed = 0;
for (const d of deliveries) {
  try {
    const payload = webhook.verify(d.body, d.headers);
    console.log(`ok ${d.headers["webhook-id"]} ${payload.type}`);
  } catch (e) {
    failed += 1;
    console.log(`FAILED ${d.headers["webhook-id"]}: ${e.message}`);
  }
}
process.exit(failed ? 1 : 0);
