// Keeps wrangler dev's local Queues delivering, and every retry they were asked for, when a log
// line fails.
//
// miniflare's queue broker (the local stand-in for Cloudflare Queues) logs through wrangler's
// loopback connection, and under load that call can fail ("Network connection lost."). Two
// places in its flush of a batch await such a log line where a failure costs more than the line:
//
// - After the consumer answers it prints "QUEUE <name> n/m". That call sits outside the broker's
//   own try/catch, so the flush throws before clearing its pending marker: that queue never
//   dispatches another batch, whatever is sent to it.
// - For each message the consumer asked to retry it logs "Retrying message ..." before it
//   schedules the retry, so a failed line drops the message: a job that asked to be retried in
//   2 s is never run again.
//
// The first part wraps the flush so that a failure clears the marker (when it is still this
// flush's) and schedules the next batch. The second makes the broker's log lines unable to fail:
// a line the loopback refuses goes to the broker's own console instead. Each part changes nothing
// else, is applied on every `make` when missing (idempotent), and fails loudly if the pinned
// miniflare no longer holds the code it patches.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(join(process.cwd(), "package.json"));
const wranglerDir = dirname(require.resolve("wrangler/package.json"));
const miniflareDir = dirname(createRequire(join(wranglerDir, "package.json")).resolve("miniflare/package.json"));
const file = join(miniflareDir, "dist/src/workers/queues/broker.worker.js");
const version = JSON.parse(readFileSync(join(miniflareDir, "package.json"), "utf8")).version;

const flushMarker = "#flushBatch";
const logMarker = "queue broker: a log line failed";
const parts = [
    {
        what: "a failed flush no longer stops its queue",
        marker: flushMarker,
        head: "  #flush = async () => {\n",
        replacement: `  #flush = async () => {
    const started = this.#pendingFlush;
    try {
      await this.${flushMarker}();
    } catch (e) {
      console.error("queue broker: a flush failed after dispatching; going on with the next batch:", String(e));
      if (this.#pendingFlush === started) {
        this.#pendingFlush = void 0;
        this.#messages.length > 0 && this.#ensurePendingFlush();
      }
    }
  };
  ${flushMarker} = async () => {
`,
    },
    {
        what: "a failed log line no longer drops a retry",
        marker: logMarker,
        head: "var QueueBrokerObject = class extends MiniflareDurableObject {\n",
        replacement: `var QueueBrokerObject = class extends MiniflareDurableObject {
  async logWithLevel(level, message) {
    try {
      await super.logWithLevel(level, message);
    } catch (e) {
      console.error("${logMarker}:", String(e), message);
    }
  }
`,
    },
];

let source = readFileSync(file, "utf8");
const applied = [];
for (const part of parts) {
    if (source.includes(part.marker)) {
        continue;
    }
    if (source.split(part.head).length !== 2) {
        console.error(`miniflare ${version}: the queue broker's code for "${part.what}" was not found once in ${file}; check the patch`);
        process.exit(1);
    }
    source = source.replace(part.head, part.replacement);
    applied.push(part.what);
}
if (applied.length === 0) {
    console.log(`miniflare ${version}: queue broker already patched`);
    process.exit(0);
}
writeFileSync(file, source);
console.log(`miniflare ${version}: queue broker patched (${applied.join("; ")})`);
