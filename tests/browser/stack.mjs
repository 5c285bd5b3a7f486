// Starts what the console test drives, on its own ports and in its own directory, and stops all
// of it: the worker in `wrangler dev` (test bundle, local D1/Queues/DOs, the console as static
// assets), the fake Telnyx API (`sim carrier`, which signs receipts back to the worker), a
// customer webhook endpoint, and headless Chromium through playwright-core.
import { spawn, spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync, randomBytes, sign as edSign } from 'node:crypto';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const { chromium } = createRequire(path.join(ROOT, 'console/package.json'))('playwright-core');

export const ADMIN_TOKEN = `console-admin-${randomBytes(12).toString('hex')}`;
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const QUIET_ENV = { WRANGLER_SEND_METRICS: 'false', WRANGLER_SEND_ERROR_REPORTS: 'false', CLOUDFLARE_CF_FETCH_ENABLED: 'false', NO_COLOR: '1' };

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * How many times its written bound a wait allows, as in the Rust tests (`sim::api::PATIENCE`):
 * bounds are written as an idle machine needs them, and `make test` runs its four suites at once on
 * two cores, where a loaded host has been measured an order of magnitude slower. A bound guards
 * against a hang; it never asserts speed.
 */
export const PATIENCE = 4;

/** The milliseconds a wait written with `ms` allows. */
export const patient = (ms) => ms * PATIENCE;

/** Playwright's bound for each action and wait that names none: its own 30 s, [`patient`]. */
export const ACTION_TIMEOUT = patient(30_000);

/** Polls `check` (async, truthy = done) every 500 ms until `patient(timeoutMs)`; returns its last value. */
export async function eventually(check, timeoutMs, what) {
  const allowed = patient(timeoutMs);
  const deadline = Date.now() + allowed;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${allowed} ms waiting for ${what}`);
    await sleep(500);
  }
}

/** Signs Telnyx webhooks (Ed25519 over `timestamp|body`) with this run's key. */
class TelnyxSigner {
  constructor() {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    this.privateKey = privateKey;
    this.publicBase64 = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32).toString('base64');
    this.seedBase64 = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(-32).toString('base64');
  }

  headers(body) {
    const timestamp = String(Math.floor(Date.now() / 1000));
    const signature = edSign(null, Buffer.from(`${timestamp}|${body}`), this.privateKey).toString('base64');
    return { 'telnyx-timestamp': timestamp, 'telnyx-signature-ed25519': signature };
  }
}

/** `call_<hex>`: the worker's id for a Telnyx call session (core::call_machine::call_id). */
export function callId(session) {
  return `call_${createHash('sha256').update(`telnyx\n${session}`).digest('hex').slice(0, 32)}`;
}

/** A GET of /embed?src= answers a page of this origin that frames `src` (the portal test); true when it did. */
function embed(req, res) {
  if (req.method !== 'GET' || !req.url.startsWith('/embed?')) return false;
  const src = new URL(req.url, 'http://x').searchParams.get('src') || '';
  const attr = src.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end(`<!doctype html><title>A platform's dashboard</title><h1>Your webhooks</h1><iframe id="portal" title="Webhook portal" src="${attr}" style="width:100%;height:700px;border:0"></iframe>`);
  return true;
}

export class Stack {
  async start() {
    this.dir = path.join(ROOT, 'target/console-test', `run-${process.pid}-${Date.now()}`);
    this.shots = path.join(this.dir, 'screenshots');
    fs.mkdirSync(this.shots, { recursive: true });
    this.children = [];
    this.signer = new TelnyxSigner();
    const [port, carrierPort, hookPort, inspectorPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
    this.base = `http://127.0.0.1:${port}`;
    this.hooks = `http://127.0.0.1:${hookPort}`;

    // The customer's endpoint: /ok (and any path in `healthy`) answers 200, anything else 500.
    // A GET of /embed?src= is a page of another origin that frames `src` (the portal test).
    this.received = [];
    this.healthy = new Set();
    this.hookServer = http.createServer((req, res) => {
      if (embed(req, res)) return;
      let body = '';
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        this.received.push({ path: req.url, id: req.headers['webhook-id'], body, signature: req.headers['webhook-signature'] });
        const ok = req.url === '/ok' || this.healthy.has(req.url);
        res.writeHead(ok ? 200 : 500, { 'content-type': 'text/plain' });
        res.end(ok ? 'ok' : 'the customer endpoint is down');
      });
    });
    await new Promise((resolve) => this.hookServer.listen(hookPort, '127.0.0.1', resolve));
    // Another origin (another port) with the same embedding page, which no account allows.
    const elsewherePort = await freePort();
    this.elsewhere = `http://127.0.0.1:${elsewherePort}`;
    this.elsewhereServer = http.createServer((req, res) => { if (!embed(req, res)) { res.writeHead(404); res.end(); } });
    await new Promise((resolve) => this.elsewhereServer.listen(elsewherePort, '127.0.0.1', resolve));

    fs.writeFileSync(path.join(this.dir, 'dev.keys'), `TELNYX_PRIVATE_SEED=${this.signer.seedBase64}\n`, { mode: 0o600 });
    const env = {
      TELNYX_PUBLIC_KEY: this.signer.publicBase64,
      TELNYX_API_KEY: 'console-telnyx-api-key',
      TELNYX_API_BASE: `http://127.0.0.1:${carrierPort}`,
      TELNYX_MESSAGING_PROFILE_ID: 'console-profile',
      TELNYX_CONNECTION_ID: 'console-connection',
      TWILIO_AUTH_TOKEN: 'console-twilio-token',
      PLIVO_AUTH_TOKEN: 'console-plivo-token',
      PUBLIC_BASE_URL: this.base,
      ADMIN_TOKEN,
      ALLOW_PRIVATE_ENDPOINTS: 'true',
      E2E_WEBHOOK_SCHEDULE_SECS: '0,1,1,1,1,1,1,1',
    };
    fs.writeFileSync(path.join(this.dir, 'test.env'), Object.entries(env).map(([k, v]) => `${k}=${v}\n`).join(''), { mode: 0o600 });

    // The run's wrangler.toml and migrated local state, made by the Rust harness's own code
    // (`exactly_tests::stage`), so both start the worker from the same config.
    const targetDir = process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target');
    const built = spawnSync('cargo', ['build', '-q', '-p', 'sim', '-p', 'exactly-tests', '--bins'], { cwd: ROOT, stdio: 'inherit' });
    if (built.status !== 0) throw new Error('cargo build -p sim -p exactly-tests --bins failed');
    const staged = spawnSync(path.join(targetDir, 'debug/stage'), [this.dir], { cwd: ROOT, env: { ...process.env, ...QUIET_ENV }, encoding: 'utf8' });
    if (staged.status !== 0) throw new Error(`staging the worker failed:\n${staged.stdout}\n${staged.stderr}`);
    const wrangler = path.join(ROOT, 'node_modules/.bin/wrangler');
    const config = ['--config', path.join(this.dir, 'wrangler.toml'), '--persist-to', path.join(this.dir, 'state')];
    this.spawn('sim', path.join(targetDir, 'debug/sim'),
      ['carrier', '--listen', `127.0.0.1:${carrierPort}`, '--worker', this.base, '--keys', path.join(this.dir, 'dev.keys')]);
    this.spawn('wrangler', wrangler, ['dev', '--local', '--ip', '127.0.0.1', '--port', String(port), '--inspector-port', String(inspectorPort),
      '--show-interactive-dev-session=false', ...config, '--env-file', path.join(this.dir, 'test.env')]);
    await eventually(async () => {
      try {
        await fetch(`${this.base}/healthz`);
        return true;
      } catch {
        return false;
      }
    }, 180_000, 'wrangler dev to answer');

    this.browser = await chromium.launch({
      timeout: ACTION_TIMEOUT,
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
    });
    return this;
  }

  /** Starts a child in its own process group (so stopping it stops what it started) with its output in the run's log. */
  spawn(name, command, args) {
    const log = fs.openSync(path.join(this.dir, `${name}.log`), 'a');
    const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...QUIET_ENV }, stdio: ['ignore', log, log], detached: true });
    this.children.push({ name, child });
  }

  logTail(name, lines = 30) {
    try {
      return fs.readFileSync(path.join(this.dir, `${name}.log`), 'utf8').split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  }

  /** A browser context whose actions, waits and navigations each allow [`ACTION_TIMEOUT`]. */
  async context(options) {
    const context = await this.browser.newContext(options);
    context.setDefaultTimeout(ACTION_TIMEOUT);
    context.setDefaultNavigationTimeout(ACTION_TIMEOUT);
    return context;
  }

  async stop() {
    if (this.browser) await this.browser.close().catch(() => {});
    for (const { child } of this.children.reverse()) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      try { process.kill(-child.pid, 'SIGTERM'); } catch { /* already gone */ }
      const stopped = await Promise.race([exited.then(() => true), sleep(10_000).then(() => false)]);
      if (!stopped) {
        try { process.kill(-child.pid, 'SIGKILL'); } catch { /* already gone */ }
        await exited;
      }
    }
    if (this.hookServer) await new Promise((resolve) => this.hookServer.close(resolve));
    if (this.elsewhereServer) await new Promise((resolve) => this.elsewhereServer.close(resolve));
  }

  /** An API call as `curl` would make it; resolves to { status, json }. */
  async api(method, urlPath, token, body, headers = {}) {
    const response = await fetch(`${this.base}${urlPath}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    const text = await response.text();
    let json = null;
    try { json = text ? JSON.parse(text) : null; } catch { json = null; }
    return { status: response.status, json, text };
  }

  /** Delivers a signed Telnyx webhook; throws unless the worker answers 200. */
  async deliverTelnyx(id, eventType, payload, occurredAt = new Date().toISOString()) {
    const body = JSON.stringify({ data: { record_type: 'event', id, event_type: eventType, occurred_at: occurredAt, payload }, meta: { attempt: 1 } });
    const response = await fetch(`${this.base}/webhooks/telnyx`, { method: 'POST', headers: { 'content-type': 'application/json', ...this.signer.headers(body) }, body });
    const text = await response.text();
    if (response.status !== 200) throw new Error(`${eventType} ${id}: ${response.status} ${text}`);
    return JSON.parse(text);
  }
}
