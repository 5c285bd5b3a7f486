// Keeps wrangler dev's local Queues delivering after a failed log line.
//
// miniflare's queue broker (the local stand-in for Cloudflare Queues) dispatches one batch at a
// time per queue, marking a flush as pending until the batch is settled. After the consumer
// answers, it prints "QUEUE <name> n/m" through wrangler's loopback connection; under load that
// call can fail ("Network connection lost."), and because it sits outside the broker's own
// try/catch the flush throws before clearing its marker: that queue never dispatches another
// batch, whatever is sent to it. The consumer had finished and every message was settled.
//
// This wraps the flush so that a failure clears the marker (when it is still this flush's) and
// schedules the next batch. It changes nothing else, runs on every `make` (idempotent), and
// fails loudly if the pinned miniflare no longer holds the code it wraps.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(join(process.cwd(), "package.json"));
const wranglerDir = dirname(require.resolve("wrangler/package.json"));
const miniflareDir = dirname(createRequire(join(wranglerDir, "package.json")).resolve("miniflare/package.json"));
const file = join(miniflareDir, "dist/src/workers/queues/broker.worker.js");
const version = JSON.parse(readFileSync(join(miniflareDir, "package.json"), "utf8")).version;

const source = readFileSync(file, "utf8");
const marker = "#flushBatch";
if (source.includes(marker)) {
    console.log(`miniflare ${version}: queue broker already patched`);
    process.exit(0);
}
const head = "  #flush = async () => {\n";
if (source.split(head).length !== 2) {
    console.error(`miniflare ${version}: the queue broker's #flush was not found once in ${file}; check the patch`);
    process.exit(1);
}
const wrapped = `  #flush = async () => {
    const started = this.#pendingFlush;
    try {
      await this.${marker}();
    } catch (e) {
      console.error("queue broker: a flush failed after dispatching; going on with the next batch:", String(e));
      if (this.#pendingFlush === started) {
        this.#pendingFlush = void 0;
        this.#messages.length > 0 && this.#ensurePendingFlush();
      }
    }
  };
  ${marker} = async () => {
`;
writeFileSync(file, source.replace(head, wrapped));
console.log(`miniflare ${version}: queue broker patched (a failed flush no longer stops its queue)`);
