// Lists the account's newest messages with the packaged client, reading the worker and the API
// key from the profile `bin/sim account create` wrote (`.dev.account.json`, or EXACTLY_PROFILE):
//
//     npm install /path/to/exactly/clients/typescript   # after `npm run build` there
//     EXACTLY_PROFILE=/path/to/exactly/.dev.account.json node list-messages.mjs
import { readFileSync } from "node:fs";
import { createExactlyClient } from "@exactly/client";

const profile = JSON.parse(readFileSync(process.env.EXACTLY_PROFILE ?? ".dev.account.json", "utf8"));
const exactly = createExactlyClient({ baseUrl: profile.url, token: profile.api_key });
const { data, error, response } = await exactly.GET("/v1/messages", { params: { query: { limit: 10 } } });
if (error) {
  console.error(`GET /v1/messages: ${response.status} ${error.error.message}`);
  process.exit(1);
}
for (const message of data.data) {
  console.log(`${message.id} ${message.direction} ${message.status} ${message.to}`);
}
