// A CPU profile of a worker's isolate through wrangler dev's inspector (Chrome DevTools
// Protocol), and the table of its top functions by self time.
//
//   node scripts/profile.mjs record PORT OUT.cpuprofile [INTERVAL_US]
//       connects to ws://127.0.0.1:PORT/ws, starts the sampler, prints "profiling" and records
//       until stdin closes; then writes OUT and prints its summary (below) as JSON.
//   node scripts/profile.mjs summarize FILE.cpuprofile [REQUESTS] [TOP]
//       prints the summary of a recorded profile as a Markdown table.
//
// Shares are of the isolate's busy time: every sample but "(idle)", each owning the time to the
// next one up to ten sampling intervals (a longer gap is reported as unsampled). Wasm frames carry the
// names of the bundle's name section (scripts/profile.py builds the bundle with one).
import { readFileSync, writeFileSync } from "node:fs";
import { basename } from "node:path";
import WebSocket from "ws";

/** The kind of code a frame runs, for the shares line. */
function category(frame) {
  const { functionName: name, url } = frame;
  if (url.startsWith("wasm://")) return "wasm";
  if (name === "(idle)") return "idle";
  if (name === "(garbage collector)") return "gc";
  if (name === "(program)" || name === "(root)") return "program";
  if (/d1|database/i.test(url)) return "d1 client";
  if (url === "") return "js builtins";
  if (/cloudflare-internal|node-internal|workerd|miniflare/i.test(url)) return "runtime js";
  return "worker js";
}

/** Work named by any frame on the stack: a sample counts for a group when one of its frames
 * matches, so the time of the builtins a call reaches is counted with it. */
const GROUPS = {
  "signature check (ed25519, sha512, WebCrypto verify)": (f) => /curve25519|ed25519|sha2::|^verify$/.test(f.functionName),
  "log line (console.log)": (f) => /__wbg_log\b|console::log|^log$/.test(f.functionName),
  "D1 client": (f) => /d1-api/.test(f.url),
  "queue send": (f) => /__wbg_send\b|Queue::send|^send$/.test(f.functionName),
  "request body read": (f) => /__wbg_(read|getReader|releaseLock|arrayBuffer)\b|body_capped|^text$|^arrayBuffer$/.test(f.functionName),
};

/** A gap between samples longer than this many sampling intervals is counted as unsampled. */
const GAP_INTERVALS = 10;

/** Self time per function (name, script, line) and per category, in ms. */
export function summarize(profile, requests = 0, top = 25) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  // A builtin is named by its caller too: the native side of `console.log` is "(anonymous)".
  const caller = (id) => {
    const p = byId.get(parent.get(id));
    return p ? `<- ${short(p.callFrame.functionName || "(anonymous)")}` : "";
  };
  // The sampling interval as it ran (the median gap between samples). A gap many intervals
  // long means the sampler's thread did not run (on a loaded machine it waits for a core like
  // everything else), so what the isolate did meanwhile is unknown: the sample before it owns
  // at most GAP_INTERVALS intervals and the rest is counted as unsampled, not given to whichever
  // function happened to be on the stack when the sampler stopped.
  const deltas = profile.timeDeltas.filter((dt) => dt > 0).sort((a, b) => a - b);
  const interval = deltas.length ? deltas[Math.floor(deltas.length / 2)] : 0;
  const cap = interval * GAP_INTERVALS;
  let unsampledUs = 0;
  let gaps = 0;
  const selfUs = new Map();
  profile.samples.forEach((id, i) => {
    // timeDeltas[i] is the time before sample i; the sample owns the interval that follows.
    const dt = Math.max(profile.timeDeltas[i + 1] ?? 0, 0);
    const owned = cap ? Math.min(dt, cap) : dt;
    if (owned < dt) {
      unsampledUs += dt - owned;
      gaps += 1;
    }
    selfUs.set(id, (selfUs.get(id) ?? 0) + owned);
  });
  const functions = new Map();
  const categories = {};
  let total = 0;
  for (const [id, us] of selfUs) {
    const frame = byId.get(id).callFrame;
    const cat = category(frame);
    categories[cat] = (categories[cat] ?? 0) + us;
    total += us;
    if (cat === "idle") continue;
    const where = frame.url.startsWith("wasm://")
      ? "wasm"
      : frame.url === ""
        ? caller(id)
        : `${basename(frame.url)}:${frame.lineNumber + 1}`;
    const key = `${frame.functionName || "(anonymous)"}\u0000${where}`;
    const f = functions.get(key) ?? { name: frame.functionName || "(anonymous)", where, category: cat, us: 0 };
    f.us += us;
    functions.set(key, f);
  }
  const busy = total - (categories.idle ?? 0);
  const groups = Object.fromEntries(Object.keys(GROUPS).map((g) => [g, 0]));
  for (const [id, us] of selfUs) {
    const hit = new Set();
    for (let n = id; n !== undefined; n = parent.get(n)) {
      const frame = byId.get(n).callFrame;
      for (const [g, test] of Object.entries(GROUPS)) if (test(frame)) hit.add(g);
    }
    for (const g of hit) groups[g] += us;
  }
  const share = (us) => (busy ? (100 * us) / busy : 0);
  return {
    total_ms: (total + unsampledUs) / 1000,
    busy_ms: busy / 1000,
    interval_us: interval,
    unsampled_ms: unsampledUs / 1000,
    unsampled_gaps: gaps,
    requests,
    busy_us_per_request: requests ? busy / requests : null,
    groups: Object.fromEntries(Object.entries(groups).map(([g, us]) => [g, { ms: us / 1000, share: share(us) }])),
    categories: Object.fromEntries(
      Object.entries(categories)
        .filter(([c]) => c !== "idle")
        .sort((a, b) => b[1] - a[1])
        .map(([c, us]) => [c, { ms: us / 1000, share: share(us) }]),
    ),
    top: [...functions.values()]
      .sort((a, b) => b.us - a.us)
      .slice(0, top)
      .map((f) => ({ name: f.name, where: f.where, category: f.category, self_ms: f.us / 1000, share: share(f.us) })),
  };
}

function short(name) {
  return name.length > 60 ? name.slice(0, 57) + "..." : name;
}

/** The summary as Markdown: the shares line, then the top functions. */
export function markdown(s) {
  const cats = Object.entries(s.categories)
    .map(([c, v]) => `${c} ${v.share.toFixed(0)}%`)
    .join(", ");
  const perRequest = s.busy_us_per_request ? `, ${(s.busy_us_per_request / 1000).toFixed(2)} ms busy per request` : "";
  const groups = Object.entries(s.groups)
    .map(([g, v]) => `${g} ${v.share.toFixed(1)}%`)
    .join(", ");
  const unsampled = s.unsampled_gaps
    ? ` ${s.unsampled_ms.toFixed(0)} ms fell in ${s.unsampled_gaps} gaps of over ${GAP_INTERVALS} sampling intervals, when the sampler did not run, and are counted nowhere.`
    : "";
  const lines = [
    `Busy ${s.busy_ms.toFixed(0)} ms of ${s.total_ms.toFixed(0)} ms${perRequest}.${unsampled} Shares of busy time: ${cats}.`,
    "",
    `Including what they call: ${groups}.`,
    "",
    "| self ms | share | kind | function | where |",
    "|---|---|---|---|---|",
  ];
  for (const f of s.top) {
    const name = f.name.length > 80 ? f.name.slice(0, 77) + "..." : f.name;
    lines.push(`| ${f.self_ms.toFixed(1)} | ${f.share.toFixed(1)}% | ${f.category} | \`${name.replace(/\|/g, "\\|")}\` | ${f.where} |`);
  }
  return lines.join("\n");
}

/** Names the anonymous functions of the bundle's JavaScript: wasm-bindgen's imports are
 * `__name(function (...) {...}, "__wbg_get_...")` in wrangler's bundle. Read after the profile,
 * so the debugger is not enabled while it samples. */
async function nameGlue(profile, call) {
  const frames = profile.nodes.map((n) => n.callFrame).filter((f) => !f.functionName && f.url.endsWith(".js") && f.lineNumber >= 0);
  const scripts = [...new Set(frames.map((f) => f.scriptId))];
  if (!scripts.length) return;
  await call("Debugger.enable");
  const sources = new Map();
  for (const id of scripts) {
    try {
      sources.set(id, (await call("Debugger.getScriptSource", { scriptId: id })).scriptSource.split("\n"));
    } catch {
      // A script gone since (an isolate restarted) keeps its anonymous frames.
    }
  }
  await call("Debugger.disable");
  for (const frame of frames) {
    const lines = sources.get(frame.scriptId);
    if (!lines) continue;
    const text = lines.slice(frame.lineNumber, frame.lineNumber + 12).join("\n").slice(frame.columnNumber);
    const name = /\}\s*,\s*"([^"]+)"\)/.exec(text);
    if (name) frame.functionName = name[1].replace(/_[0-9a-f]{16}$/, "");
  }
}

async function record(port, out, intervalUs) {
  // The inspector proxy accepts local origins only.
  const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`, { origin: "http://localhost" });
  let next = 1;
  const pending = new Map();
  const call = (method, params = {}) =>
    new Promise((resolve, reject) => {
      const id = next++;
      pending.set(id, { resolve, reject, method });
      ws.send(JSON.stringify({ id, method, params }));
    });
  ws.on("message", (data) => {
    const msg = JSON.parse(data.toString());
    const waiter = msg.id && pending.get(msg.id);
    if (!waiter) return;
    pending.delete(msg.id);
    if (msg.error) waiter.reject(new Error(`${waiter.method}: ${JSON.stringify(msg.error)}`));
    else waiter.resolve(msg.result);
  });
  await new Promise((resolve, reject) => {
    ws.once("open", resolve);
    ws.once("error", reject);
  });
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: intervalUs });
  await call("Profiler.start");
  console.log("profiling");
  await new Promise((resolve) => {
    process.stdin.on("data", () => {});
    process.stdin.on("end", resolve);
  });
  const { profile } = await call("Profiler.stop");
  await nameGlue(profile, call);
  ws.close();
  writeFileSync(out, JSON.stringify(profile));
}

const [command, ...args] = process.argv.slice(2);
if (command === "record") {
  const [port, out, interval = "200"] = args;
  await record(Number(port), out, Number(interval));
  console.log(JSON.stringify(summarize(JSON.parse(readFileSync(out, "utf8")))));
} else if (command === "summarize") {
  const [file, requests = "0", top = "25"] = args;
  console.log(markdown(summarize(JSON.parse(readFileSync(file, "utf8")), Number(requests), Number(top))));
} else {
  console.error("usage: node scripts/profile.mjs record PORT OUT [INTERVAL_US] | summarize FILE [REQUESTS] [TOP]");
  process.exit(2);
}
