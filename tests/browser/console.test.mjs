// The console in headless Chromium against the real worker and the fake carrier: sign in, send a
// message and watch it reach `delivered`, open a call and see its legs, pause (or disable) an
// endpoint, replay an event, and as the operator re-drive a failed carrier event.
//
// Steps that need an API this worker does not have yet print a note and skip, so the test keeps
// passing and covers more as routes arrive. Screenshots go to the run directory under
// target/console-test/; with CONSOLE_SCREENSHOTS=1 they also replace docs/console/*.png.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { ADMIN_TOKEN, ROOT, Stack, callId, eventually, patient } from './stack.mjs';

const DESKTOP = { width: 1200, height: 820 };
const MOBILE = { width: 375, height: 760 };
const stack = new Stack();
let page;
let account;
const OWNED = `+1555${String(process.pid % 1000).padStart(3, '0')}1001`;
const UNOWNED = `+1555${String(process.pid % 1000).padStart(3, '0')}1002`;
const TARGETS = ['+15557770001', '+15557770002'];
const run = `${process.pid}-${Date.now()}`;

async function shot(name, { mobile = false, fullPage = true, dark = false, on = page } = {}) {
  if (on !== page) {
    const file = path.join(stack.shots, `${name}.png`);
    await on.screenshot({ path: file, fullPage });
    if (process.env.CONSOLE_SCREENSHOTS === '1') fs.copyFileSync(file, path.join(ROOT, 'docs/console', `${name}.png`));
    return;
  }
  await page.emulateMedia({ colorScheme: dark ? 'dark' : 'light' });
  await page.setViewportSize(mobile ? MOBILE : DESKTOP);
  await page.waitForTimeout(150);
  const file = path.join(stack.shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage });
  if (process.env.CONSOLE_SCREENSHOTS === '1') {
    fs.mkdirSync(path.join(ROOT, 'docs/console'), { recursive: true });
    fs.copyFileSync(file, path.join(ROOT, 'docs/console', `${name}.png`));
  }
  await page.setViewportSize(DESKTOP);
  await page.emulateMedia({ colorScheme: 'light' });
}

/** At 375 px the page must not scroll sideways (wide tables scroll inside their own region). */
async function assertFitsMobile(what) {
  await page.setViewportSize(MOBILE);
  await page.waitForTimeout(100);
  const { width, widest } = await page.evaluate(() => {
    // The outermost element that sticks out, to name in a failure.
    const out = [...document.querySelectorAll('body *')].find((e) => e.getBoundingClientRect().right > innerWidth + 0.5 && !e.closest('.table-wrap'));
    return { width: document.documentElement.scrollWidth, widest: out ? `${out.tagName.toLowerCase()}.${out.className}: ${out.textContent.slice(0, 60)}` : '' };
  });
  await page.setViewportSize(DESKTOP);
  assert.ok(width <= MOBILE.width, `${what} is ${width} px wide at 375 px (${widest})`);
}

/** A link of the main navigation. */
function nav(name) {
  return page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
}

async function signIn(token) {
  await page.goto(`${stack.base}/console/`);
  await page.getByLabel('API key or admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

async function signOut() {
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key or admin token').waitFor();
}

before(async () => {
  await stack.start();
  const context = await stack.context({ viewport: DESKTOP, deviceScaleFactor: 1 });
  page = await context.newPage();
  page.on('dialog', (dialog) => dialog.accept());
  page.on('pageerror', (error) => console.error(`console page error: ${error.message}`));
  const created = await stack.api('POST', '/admin/accounts', ADMIN_TOKEN, { name: 'console test' });
  assert.equal(created.status, 201, created.text);
  account = created.json;
  const number = await stack.api('POST', '/admin/numbers', ADMIN_TOKEN, { account_id: account.id, phone_number: OWNED, ring_targets: TARGETS });
  assert.equal(number.status, 201, number.text);
  // An endpoint that always fails, subscribed to message.sent: its deliveries end failed for the
  // operator. `no-breaker` keeps its circuit closed in the test build, so its attempts run out on
  // the short schedule instead of waiting for probes.
  const failing = await stack.api('POST', '/v1/webhook_endpoints', account.api_key, { url: `${stack.hooks}/down-no-breaker`, event_types: ['message.sent'] });
  assert.equal(failing.status, 201, failing.text);
}, { timeout: patient(300_000) });

after(async () => {
  await stack.stop();
  console.log(`console test: run directory ${path.relative(ROOT, stack.dir)} (screenshots, logs)`);
});

test('the console is served at /console with its security headers, and the API still reaches the worker', async () => {
  const redirect = await fetch(`${stack.base}/console`, { redirect: 'manual' });
  assert.ok([301, 302, 307, 308].includes(redirect.status), `GET /console answered ${redirect.status}`);
  const index = await fetch(`${stack.base}/console/`);
  assert.equal(index.status, 200);
  assert.match(await index.text(), /<script type="module" src="\/console\/app.js">/);
  assert.match(index.headers.get('content-security-policy') || '', /script-src 'self'/);
  const unauthorized = await fetch(`${stack.base}/v1/messages`);
  assert.equal(unauthorized.status, 401, 'a /v1 route is answered by the worker, not by the assets');
  assert.equal((await unauthorized.json()).error.code, 'unauthorized');
});

test('sign in: a wrong token shows the API error, an API key opens the account', async () => {
  await signIn('sk_not_a_key');
  await page.getByRole('alert').filter({ hasText: 'not a valid API key' }).waitFor();
  await shot('sign-in', { mobile: true });
  await page.getByLabel('API key or admin token').fill(account.api_key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { level: 1, name: 'Messages' }).waitFor();
  const stored = await page.evaluate(() => sessionStorage.getItem('exactly.console.session'));
  assert.match(stored, /"role":"customer"/);
  assert.ok(!page.url().includes(account.api_key), 'the key is never in the URL');
  assert.deepEqual((await page.context().cookies()).length, 0, 'no cookie is set');
});

test('endpoints: create one from the console and see its secret once; every call reads its own writes', async () => {
  // The console's /v1 calls of this test (it signed in before, so its session has a bookmark).
  const sent = [];
  const record = (request) => { if (new URL(request.url()).pathname.startsWith('/v1/')) sent.push(request); };
  page.on('request', record);
  await nav('Endpoints').click();
  await page.getByText('Add an endpoint').click();
  await page.getByLabel('URL').fill(`${stack.hooks}/ok`);
  await page.getByLabel('message.sent').check();
  await page.getByRole('button', { name: 'Create endpoint' }).click();
  await page.getByText('Signing secret (shown once)').waitFor();
  assert.match(await page.locator('.secret code').textContent(), /^whsec_/);
  await page.getByRole('region', { name: 'Endpoints' }).getByText(`${stack.hooks}/ok`).waitFor();
  page.off('request', record);
  // The write's answer carries its bookmark, and every call sends back the latest it was given,
  // so the list after the create is read at least as recent as the create.
  const create = sent.find((r) => r.method() === 'POST' && new URL(r.url()).pathname === '/v1/webhook_endpoints');
  assert.ok(create, `the create went out: ${sent.map((r) => `${r.method()} ${r.url()}`).join(', ')}`);
  const written = (await (await create.response()).allHeaders())['x-d1-bookmark'];
  assert.ok(written, 'the create answered with a bookmark');
  const without = sent.filter((r) => !r.headers()['x-d1-bookmark']).map((r) => `${r.method()} ${r.url()}`);
  assert.deepEqual(without, [], 'every /v1 call sends the session\'s bookmark back');
  assert.ok(sent.indexOf(create) < sent.length - 1, 'the list was read again after the create');
});

test('messages: send one and watch it reach delivered', async () => {
  await nav('Messages').click();
  await page.getByText('Send a message').click();
  await page.getByLabel('From (a number of this account)').fill(OWNED);
  await page.getByLabel('To', { exact: true }).fill('+15550003333');
  await page.getByLabel('Text').fill(`Hello from the console [deliver] ${run}`);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await page.getByRole('heading', { level: 1, name: /Message msg_/ }).waitFor();
  // The fake carrier answers, then sends the signed `sent` and `delivered` receipts a second later.
  await page.locator('.status-line .badge', { hasText: 'delivered' }).waitFor({ timeout: patient(90_000) });
  await page.getByRole('list', { name: 'Status history' }).getByText('delivered').first().waitFor();
  await page.getByRole('link', { name: 'message.delivered' }).waitFor({ timeout: patient(30_000) });
  assert.match(await page.locator('.facts').textContent(), /Charge1 segment\(s\), charged/);
  await shot('message');
  await shot('message-mobile', { mobile: true });
  await assertFitsMobile('the message page');

  await nav('Messages').click();
  // The list's own heading first: until it renders, the message page (whose facts have a
  // "Status" too) is still on screen.
  await page.getByRole('heading', { level: 1, name: 'Messages', exact: true }).waitFor();
  await page.getByLabel('Status').selectOption('delivered');
  await page.getByRole('region', { name: 'Messages' }).getByText(`Hello from the console [deliver] ${run}`).waitFor();
  await shot('messages');
  await assertFitsMobile('the message list');
});

test('messages: schedule one for later and cancel it before its time', async () => {
  await nav('Messages').click();
  await page.getByText('Send a message').click();
  await page.getByLabel('From (a number of this account)').fill(OWNED);
  await page.getByLabel('To', { exact: true }).fill('+15550003333');
  await page.getByLabel('Text').fill(`Later from the console ${run}`);
  // An hour ahead, in the browser's local time as datetime-local takes it.
  const later = new Date(Date.now() + 3600_000 - new Date().getTimezoneOffset() * 60_000).toISOString().slice(0, 16);
  await page.getByLabel('Send at (optional, up to 7 days ahead)').fill(later);
  await page.getByRole('button', { name: 'Send', exact: true }).click();
  await page.getByRole('heading', { level: 1, name: /Message msg_/ }).waitFor();
  await page.locator('.status-line .badge', { hasText: 'scheduled' }).waitFor();
  assert.match(await page.locator('.facts').textContent(), /Send at/);
  await page.getByRole('button', { name: 'Cancel the scheduled send' }).click();
  await page.locator('.status-line .badge', { hasText: 'canceled' }).waitFor();
  const id = page.url().split('/messages/')[1];
  const shown = await stack.api('GET', `/v1/messages/${decodeURIComponent(id)}`, account.api_key);
  assert.equal(shown.json.status, 'canceled');
});

test('events: see the attempts of a delivery and replay the event', async () => {
  await nav('Events').click();
  await page.getByRole('heading', { level: 1, name: 'Events', exact: true }).waitFor();
  await page.getByLabel('Type').selectOption('message.delivered');
  await page.getByRole('region', { name: 'Events' }).getByRole('link', { name: /^evt_/ }).first().click();
  await page.getByRole('heading', { level: 1, name: /Event evt_/ }).waitFor();
  await page.locator('.delivery .badge', { hasText: 'succeeded' }).first().waitFor({ timeout: patient(30_000) });
  const before = await page.locator('article.delivery').count();
  await page.getByRole('button', { name: 'Replay event' }).click();
  await page.getByRole('status').filter({ hasText: 'Replay queued' }).waitFor();
  await eventually(async () => (await page.locator('article.delivery').count()) > before, 30_000, 'the replay delivery to appear');
  await page.locator('article.delivery', { hasText: 'replay' }).locator('.badge', { hasText: 'succeeded' }).waitFor({ timeout: patient(30_000) });
  await shot('event');
  await assertFitsMobile('the event page');
});

test('calls: a sequential ring drawn with its legs', async () => {
  const session = `console-sess-${run}`;
  const call = callId(session);
  const caller = `v3:console-caller-${run}`;
  const leg = (k, extra) => ({
    call_control_id: `v3:cc-${call}:leg:${k}`, call_leg_id: `leg-${call}:leg:${k}`, call_session_id: `sess-${call}:leg:${k}`,
    direction: 'outgoing', to: TARGETS[k - 1], from: OWNED,
    client_state: Buffer.from(JSON.stringify({ call, position: k })).toString('base64'), ...extra,
  });
  const t0 = Date.now() - 120_000;
  const at = (s) => new Date(t0 + s * 1000).toISOString();
  await stack.deliverTelnyx(`console-init-${run}`, 'call.initiated', {
    call_control_id: caller, call_leg_id: `leg-${caller}`, call_session_id: session, from: '+15551230000', to: OWNED, direction: 'incoming', state: 'parked',
  }, at(0));
  const legs = async (n) => {
    const a = await stack.api('GET', `/v1/calls/${call}`, account.api_key);
    return a.status === 200 && a.json.legs.length >= n ? a.json : null;
  };
  await eventually(() => legs(1), 60_000, 'target 1 to be dialled');
  await stack.deliverTelnyx(`console-leg1-hangup-${run}`, 'call.hangup', leg(1, { hangup_cause: 'timeout', hangup_source: 'callee' }), at(20));
  await eventually(() => legs(2), 60_000, 'target 2 to be dialled');
  await stack.deliverTelnyx(`console-leg2-answered-${run}`, 'call.answered', leg(2, { state: 'answered' }), at(30));
  await eventually(async () => (await legs(2))?.status === 'in_progress', 60_000, 'the call to be answered');
  await stack.deliverTelnyx(`console-caller-hangup-${run}`, 'call.hangup', {
    call_control_id: caller, call_leg_id: `leg-${caller}`, call_session_id: session, hangup_cause: 'normal_clearing', hangup_source: 'caller',
  }, at(95));
  await eventually(async () => (await legs(2))?.status === 'completed', 60_000, 'the call to complete');

  await nav('Calls').click();
  await page.getByRole('region', { name: 'Calls' }).getByRole('link', { name: call }).click();
  await page.getByRole('heading', { level: 1, name: `Call ${call}` }).waitFor();
  const legRows = page.getByRole('region', { name: 'Legs' }).locator('tbody tr');
  await eventually(async () => (await legRows.count()) === 2, 10_000, 'two legs');
  assert.match(await legRows.nth(0).textContent(), /no answer.*timeout/);
  assert.match(await legRows.nth(1).textContent(), /answered/);
  // Dialled, answered, ended: a time in each cell the leg has one for, a dash where it has none.
  const cells = async (row) => (await legRows.nth(row).locator('td').allTextContents()).slice(4);
  const [leg1, leg2] = [await cells(0), await cells(1)];
  assert.ok(leg1[0] !== '–' && leg1[1] === '–' && leg1[2] !== '–', `leg 1 times: ${leg1}`);
  assert.ok(leg2[0] !== '–' && leg2[1] !== '–', `leg 2 times: ${leg2}`);
  const ring = page.getByRole('list', { name: 'Sequential ring' });
  await ring.getByText('Caller leg').waitFor();
  await ring.getByText('Target 1 ended').waitFor();
  await ring.getByText('Target 2 answered').waitFor();
  await ring.getByText('Bridged').waitFor();
  await ring.getByText('Ended: completed').waitFor();
  // One clock order, each entry saying whose clock it is.
  const times = await ring.locator('li time').evaluateAll((ts) => ts.map((t) => Date.parse(t.getAttribute('datetime'))));
  assert.deepEqual(times, [...times].sort((a, b) => a - b), 'the timeline is in time order');
  const clocks = await ring.locator('li').allTextContents();
  assert.ok(clocks.every((t) => /\((carrier reported|recorded)\)/.test(t)), `each entry names its clock: ${clocks}`);
  const facts = await page.locator('.facts').textContent();
  assert.match(facts, /Duration65 s/);
  assert.match(facts, /Billed minutes2/);
  assert.match(facts, /Charge2 minute\(s\), charged/);
  await shot('call');
  await shot('call-mobile', { mobile: true });
  await assertFitsMobile('the call page');
});

/** Re-reads the endpoint with the page's Refresh button and waits until the answer is shown. */
async function refreshEndpoint() {
  await page.locator('.status-line').getByRole('button', { name: 'Refresh' }).click();
  await page.locator('.status-line button:enabled', { hasText: 'Refresh' }).waitFor();
}

test('endpoints: pause, see the held count, send a test event, resume', async () => {
  await nav('Endpoints').click();
  await page.getByRole('region', { name: 'Endpoints' }).locator('tr', { hasText: `${stack.hooks}/ok` }).getByRole('link').click();
  await page.getByRole('heading', { level: 1, name: /Endpoint ep_/ }).waitFor();
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.locator('.status-line .badge', { hasText: 'paused' }).waitFor();
  // A message sent while paused is held for this endpoint, not delivered.
  const held = await stack.api('POST', '/v1/messages', account.api_key, { from: OWNED, to: '+15550003333', text: `held [deliver] ${run}` });
  assert.equal(held.status, 201, JSON.stringify(held.json));
  await eventually(async () => {
    await page.getByRole('button', { name: 'Resume' }).waitFor();
    await refreshEndpoint();
    return /Held deliveries[1-9]/.test(await page.locator('.facts').textContent());
  }, 60_000, 'the held count to show a held delivery');
  // A test send of a chosen type from the catalog, and the filter, saved and shown.
  await page.getByLabel('Test event type').selectOption('message.delivered');
  await page.getByRole('button', { name: 'Send test event' }).click();
  await page.getByRole('status').filter({ hasText: 'Test event sent' }).waitFor();
  await page.getByLabel(/^Filter/).fill('data.direction exists');
  // Ordered per resource, holding a resource whose event is exhausted: saved and shown, and what
  // the endpoint held still goes out on resume below.
  await page.getByLabel('Ordering').selectOption('resource');
  await page.getByLabel('When an ordered event is exhausted').selectOption('hold');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('.facts').getByText('data.direction exists').waitFor();
  await page.locator('.facts').getByText(/per resource, in sequence, one at a time; an exhausted event holds its resource/).waitFor();
  await page.getByLabel('Recover failed deliveries since').waitFor();
  await shot('endpoint', { mobile: true });
  await assertFitsMobile('the endpoint page');
  await page.getByRole('button', { name: 'Resume' }).click();
  await page.locator('.status-line .badge', { hasText: 'enabled' }).waitFor();
  await eventually(async () => {
    await refreshEndpoint();
    return /Held deliveries0/.test(await page.locator('.facts').textContent());
  }, 60_000, 'the held deliveries to go out on resume');
});


test('event types: the catalog shows every type with an example body', async () => {
  await nav('Event types').click();
  const table = page.getByRole('region', { name: 'Event types' });
  await table.getByText('message.delivered', { exact: true }).waitFor();
  assert.equal(await table.locator('tbody tr').count(), 16);
  await table.locator('tr', { hasText: 'call.completed' }).getByText('Example body').click();
  assert.match(await table.locator('tr', { hasText: 'call.completed' }).locator('pre').textContent(), /"billed_minutes": 2/);
  await shot('event-types');
  await assertFitsMobile('the event types page');
});

test('operator: overview, failed deliveries, and re-driving a failed carrier event', async () => {
  // A message to a number nobody owns is a visible failed carrier event.
  const inbound = `console-inbound-${run}`;
  const stored = await stack.deliverTelnyx(inbound, 'message.received', {
    id: `console-msg-${run}`, from: { phone_number: '+15550001111' }, to: [{ phone_number: UNOWNED }], text: 'to nobody yet',
  });
  await eventually(async () => {
    const a = await stack.api('GET', '/admin/carrier_events?status=failed&limit=100', ADMIN_TOKEN);
    return a.json?.data?.some((e) => e.id === stored.id);
  }, 60_000, 'the carrier event to fail');
  await eventually(async () => (await stack.api('GET', '/admin/webhook_deliveries?status=failed', ADMIN_TOKEN)).json?.data?.length > 0, 90_000, 'a delivery to the failing endpoint to fail');

  await signOut();
  await signIn(ADMIN_TOKEN);
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor();
  await page.locator('.tile', { hasText: 'Failed carrier events' }).waitFor();
  assert.match(await page.locator('.tiles').textContent(), /Failed carrier events/);
  // The running audit's standing: the stack's traffic keeps every promise.
  const audit = page.getByRole('region', { name: 'Audit', exact: true });
  await audit.locator('.audit-summary').waitFor();
  assert.match(await audit.locator('.audit-summary').textContent(), /^No violation found in \d+ rows checked/);
  await shot('operator-overview');
  await assertFitsMobile('the overview');

  await nav('Deliveries').click();
  const failedRow = page.getByRole('region', { name: 'Deliveries' }).locator('tbody tr').first();
  await failedRow.getByRole('button', { name: /^Retry / }).waitFor();
  await shot('operator-deliveries');

  // An account is created from the console: its id and key are shown once, and it is listed.
  await nav('Accounts').click();
  const newName = `console-made-${run}`;
  await page.getByLabel('Name').fill(newName);
  await page.getByRole('button', { name: 'Create account' }).click();
  const shownOnce = page.getByRole('status').filter({ hasText: 'API key (shown once)' });
  await shownOnce.waitFor();
  assert.match(await shownOnce.textContent(), /acct_[0-9a-f]+.*sk_/s);
  await page.getByRole('region', { name: 'Accounts' }).locator('tr', { hasText: newName }).waitFor();

  // The owner's number is assigned from the console, then the event is re-driven and applies.
  await page.getByLabel('Account id').fill(account.id);
  await page.getByLabel('Phone number').fill(UNOWNED);
  await page.getByRole('button', { name: 'Assign number' }).click();
  await page.getByRole('status').filter({ hasText: `${UNOWNED} now belongs to ${account.id}` }).waitFor();
  await page.getByRole('region', { name: 'Accounts' }).locator('tr', { hasText: account.id }).filter({ hasText: UNOWNED }).waitFor();
  await shot('operator-accounts');

  await nav('Carrier events').click();
  const row = page.getByRole('region', { name: 'Carrier events' }).locator('tr', { hasText: inbound });
  await row.waitFor();
  await shot('operator-carrier-events');
  await row.getByRole('button', { name: `Re-drive ${stored.id}` }).click();
  await page.getByRole('status').filter({ hasText: `Re-drove ${stored.id}` }).waitFor();
  await eventually(async () => {
    const a = await stack.api('GET', '/v1/messages?direction=inbound&limit=100', account.api_key);
    return a.json?.data?.some((m) => m.text === 'to nobody yet');
  }, 60_000, 'the re-driven event to store the message');
  await page.getByLabel('Status').selectOption('processed');
  await page.getByRole('region', { name: 'Carrier events' }).locator('tr', { hasText: inbound }).waitFor();
  await signOut();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('exactly.console.session')), null, 'signing out forgets the token');
});

test('delivery log: each attempt shows the request as sent and the answer; retry all failed re-sends each once', async () => {
  await signIn(account.api_key);
  // Usage per day: the messages sent above were charged today.
  await nav('Usage').click();
  await page.getByRole('region', { name: 'Usage per day' }).waitFor();
  assert.match(await page.locator('main p').first().textContent(), /Last 14 days: [1-9]\d* SMS segments/);
  await shot('usage');
  await nav('Endpoints').click();
  await page.getByRole('region', { name: 'Endpoints' }).locator('tr', { hasText: `${stack.hooks}/down-no-breaker` }).getByRole('link').click();
  const log = page.getByRole('region', { name: 'Delivery log' });
  await log.getByRole('region', { name: 'Attempts' }).locator('tbody tr').first().waitFor();
  await log.getByLabel('Status').selectOption('failed');
  const failedRow = log.getByRole('region', { name: 'Attempts' }).locator('tbody tr', { hasText: 'failed' }).first();
  await failedRow.waitFor();
  // One attempt opened: the request's signature header and body, the endpoint's answer.
  const attempt = log.locator('details.attempt').first();
  await attempt.locator('summary').click();
  const request = attempt.getByRole('region', { name: 'Request' });
  assert.match(await request.getByLabel('Request headers').textContent(), /webhook-signature.*v1,/s);
  assert.match(await request.locator('pre.body').textContent(), /"type":\s*"message\.sent"/);
  assert.match(await attempt.getByRole('region', { name: 'Response' }).textContent(), /the customer endpoint is down/);
  await shot('delivery-log');
  await shot('delivery-log-dark', { dark: true });
  await shot('delivery-log-mobile', { mobile: true });
  await shot('delivery-log-dark-mobile', { mobile: true, dark: true });
  await assertFitsMobile('the delivery log');

  // The endpoint heals; one retry-all re-sends each failed delivery once, its progress ends done.
  const endpointId = page.url().split('/').pop();
  // Every delivery to it settled first (none still on its retry schedule), so what is re-sent is
  // exactly what failed.
  await eventually(async () => {
    const pending = await stack.api('GET', `/admin/webhook_deliveries?status=pending&limit=100`, ADMIN_TOKEN);
    return !pending.json.data.some((d) => d.endpoint_id === endpointId);
  }, 90_000, 'the failing endpoint\'s deliveries to settle');
  const failed = await stack.api('GET', `/admin/webhook_deliveries?status=failed&limit=100`, ADMIN_TOKEN);
  const mine = failed.json.data.filter((d) => d.endpoint_id === endpointId);
  assert.ok(mine.length > 0, 'the endpoint has failed deliveries');
  const events = new Set(mine.map((d) => d.event_id));
  stack.healthy.add('/down-no-breaker');
  const before = stack.received.length;
  await log.getByRole('button', { name: /^Retry all failed/ }).click();
  const progress = page.getByRole('status', { name: 'Retry progress' });
  await progress.filter({ hasText: 'Retry done' }).waitFor({ timeout: patient(60_000) });
  assert.match(await progress.textContent(), new RegExp(`${mine.length} re-sent · ${mine.length} succeeded · 0 failed again`));
  await eventually(async () => {
    const left = await stack.api('GET', `/admin/webhook_deliveries?status=failed&limit=100`, ADMIN_TOKEN);
    return !left.json.data.some((d) => d.endpoint_id === endpointId);
  }, 30_000, 'no failed delivery left on the endpoint');
  const resent = stack.received.slice(before).filter((r) => r.path === '/down-no-breaker' && events.has(r.id)).map((r) => r.id);
  assert.equal(resent.length, mine.length, `each failed delivery re-sent once: ${resent}`);
  assert.deepEqual(new Set(resent), events, 'exactly the failed deliveries\' events');
  await signOut();
});

test('access: a read key is created, shown once, works, and is refused once revoked; a portal link is listed and revoked alone; the portal origins are set', async () => {
  await signIn(account.api_key);
  await nav('Access').click();
  await page.getByLabel('Key name').fill('support desk');
  await page.getByLabel('Scope').selectOption('read');
  await page.getByRole('button', { name: 'Create key' }).click();
  const shown = page.getByRole('status', { name: 'API key' });
  await shown.waitFor();
  const key = (await shown.locator('code').textContent()).trim();
  assert.match(key, /^sk_[0-9a-f]{64}$/);
  assert.equal((await stack.api('GET', '/v1/messages?limit=1', key)).status, 200, 'the new read key reads');
  assert.equal((await stack.api('POST', '/v1/messages', key, { from: OWNED, to: '+15550001111', text: 'no' })).status, 403, 'and writes nothing');
  const row = page.getByRole('region', { name: 'API keys' }).locator('tr', { hasText: 'support desk' });
  await row.getByRole('button', { name: 'Revoke' }).click();
  await row.getByText('revoked').waitFor();
  assert.equal((await stack.api('GET', '/v1/messages?limit=1', key)).status, 401, 'refused once revoked');
  // A portal link is listed once made, and revoked alone.
  await page.getByRole('button', { name: /Create a portal link/ }).click();
  const link = page.getByRole('status', { name: 'Portal link' });
  await link.waitFor();
  const url = (await link.locator('code').textContent()).trim();
  const [sessionId, secret] = url.split('/portal/')[1].split('#');
  const token = `${sessionId}.${secret}`;
  assert.equal((await stack.api('GET', '/v1/webhook_endpoints', token)).status, 200, 'the new link works');
  const linkRow = page.getByRole('region', { name: 'Portal links' }).locator('tr', { hasText: sessionId });
  await linkRow.getByRole('button', { name: 'Revoke link' }).click();
  await linkRow.waitFor({ state: 'detached' });
  assert.equal((await stack.api('GET', '/v1/webhook_endpoints', token)).status, 401, 'the link is refused once revoked');
  assert.equal((await stack.api('GET', '/v1/messages?limit=1', account.api_key)).status, 200, 'the key that made it goes on');
  await page.getByLabel(/Origins that may embed the portal/).fill('https://dashboard.example.com');
  await page.getByRole('button', { name: 'Save origins' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  assert.deepEqual((await stack.api('GET', '/v1/account', account.api_key)).json.portal_origins, ['https://dashboard.example.com']);
  await shot('access');
  await assertFitsMobile('the access page');
  await signOut();
});

test('portal: a link embedded by an allowed origin shows only its account, read-only is the server\'s, another origin is refused', async () => {
  // Another account with an endpoint of its own, which the portal must never show.
  const other = await stack.api('POST', '/admin/accounts', ADMIN_TOKEN, { name: 'portal neighbour' });
  const theirs = await stack.api('POST', '/v1/webhook_endpoints', other.json.api_key, { url: `${stack.hooks}/theirs`, event_types: ['message.sent'] });
  assert.equal(theirs.status, 201, theirs.text);
  const allowed = new URL(stack.hooks).origin;
  const set = await stack.api('PATCH', '/v1/account', account.api_key, { portal_origins: [allowed] });
  assert.equal(set.status, 200, set.text);
  const session = await stack.api('POST', '/v1/portal_sessions', account.api_key, { read_only: true });
  assert.equal(session.status, 201, session.text);
  const { url, token } = session.json;

  // Framed by the allowed origin: the account's endpoints, none of the neighbour's.
  const framed = await stack.context({ viewport: DESKTOP });
  const host = await framed.newPage();
  await host.goto(`${allowed}/embed?src=${encodeURIComponent(url)}`);
  const portal = host.frameLocator('#portal');
  const endpoints = portal.getByRole('region', { name: 'Endpoints' });
  await endpoints.locator('tr', { hasText: `${stack.hooks}/down-no-breaker` }).waitFor();
  assert.doesNotMatch(await endpoints.textContent(), /\/theirs/);
  assert.equal(await portal.getByText('Add an endpoint').count(), 0, 'a read-only portal offers no create');
  await endpoints.locator('tr', { hasText: `${stack.hooks}/down-no-breaker` }).getByRole('link').click();
  await portal.getByText('Read-only: this portal link').waitFor();
  assert.equal(await portal.getByRole('button', { name: 'Pause' }).count(), 0);
  await portal.getByRole('region', { name: 'Delivery log' }).waitFor();
  await shot('portal-embedded', { on: host });
  await host.setViewportSize(MOBILE);
  await shot('portal-embedded-mobile', { on: host });
  // Hiding the buttons is not the guard: the server refuses the session's writes.
  const endpointId = (await stack.api('GET', '/v1/webhook_endpoints?limit=100', account.api_key)).json.data.find((e) => e.url.endsWith('/down-no-breaker')).id;
  const pause = await stack.api('PATCH', `/v1/webhook_endpoints/${endpointId}`, token, { paused: true });
  assert.equal(pause.status, 403, pause.text);
  const anEvent = (await stack.api('GET', '/v1/events?limit=1', account.api_key)).json.data[0].id;
  const replay = await stack.api('POST', `/v1/events/${anEvent}/replay`, token, {});
  assert.equal(replay.status, 403, replay.text);
  const retry = await stack.api('POST', `/v1/webhook_endpoints/${endpointId}/retries`, token, {});
  assert.equal(retry.status, 403, retry.text);
  await framed.close();

  // The same link framed by another origin (another port is another origin): the browser
  // refuses it on the worker's frame-ancestors, and says so.
  const elsewhere = await stack.context({ viewport: DESKTOP });
  const intruder = await elsewhere.newPage();
  await intruder.goto(`${stack.elsewhere}/embed?src=${encodeURIComponent(url)}`);
  await intruder.getByRole('heading', { name: 'Your webhooks' }).waitFor();
  // A frame the browser refuses becomes its error page, never the portal.
  const child = () => intruder.frames().find((f) => f !== intruder.mainFrame());
  await eventually(async () => Boolean(child()) && child().url().startsWith('chrome-error://'), 30_000,
    `the browser to refuse the frame (it is at ${child() ? child().url() : 'nothing'})`);
  assert.equal(await intruder.frameLocator('#portal').getByRole('region', { name: 'Endpoints' }).count(), 0);
  await elsewhere.close();
});
