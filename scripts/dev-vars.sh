#!/bin/sh
# Creates the development variables (DEV_VARS, default .dev.vars) from .dev.vars.example when
# they are missing, with a new development Ed25519 key pair (the public half goes into the vars,
# the private seed into .dev.keys beside them, read by sim) and a random ADMIN_TOKEN. Every run
# then points PUBLIC_BASE_URL at the worker's PORT and every *_API_BASE at the fake carrier's
# CARRIER_PORT (defaults 8787 and 8788), so links, callbacks and sends follow the ports
# `make dev` serves on.
set -eu
cd "$(dirname "$0")/.."
PORT="${PORT:-8787}"
CARRIER_PORT="${CARRIER_PORT:-8788}"
VARS="${DEV_VARS:-.dev.vars}"
KEYS="$(dirname "$VARS")/.dev.keys"
ports() {
    node -e '
const fs = require("fs");
const [vars, port, carrier] = process.argv.slice(1);
const before = fs.readFileSync(vars, "utf8");
const after = before
  .replace(/^PUBLIC_BASE_URL=http:\/\/127\.0\.0\.1:\d+$/m, "PUBLIC_BASE_URL=http://127.0.0.1:" + port)
  .replace(/^(TELNYX|TWILIO|PLIVO)_API_BASE=http:\/\/127\.0\.0\.1:\d+$/gm, (_, c) => c + "_API_BASE=http://127.0.0.1:" + carrier);
if (after !== before) {
  fs.writeFileSync(vars, after, { mode: 0o600 });
  console.log("dev: " + vars + " now points at the worker on " + port + " and the fake carrier on " + carrier);
}
' "$VARS" "$PORT" "$CARRIER_PORT"
}
if [ -f "$VARS" ]; then
    echo "dev: $VARS exists (kept); simulator keys in $KEYS"
    ports
    exit 0
fi
node -e '
const { generateKeyPairSync } = require("crypto");
const fs = require("fs");
const [vars, keys] = process.argv.slice(1);
const { publicKey, privateKey } = generateKeyPairSync("ed25519");
const pub = publicKey.export({ format: "der", type: "spki" }).subarray(-32).toString("base64");
const seed = privateKey.export({ format: "der", type: "pkcs8" }).subarray(-32).toString("base64");
const admin = require("crypto").randomBytes(24).toString("hex");
const text = fs.readFileSync(".dev.vars.example", "utf8")
  .replace(/^TELNYX_PUBLIC_KEY=.*$/m, "TELNYX_PUBLIC_KEY=" + pub)
  .replace(/^ADMIN_TOKEN=.*$/m, "ADMIN_TOKEN=" + admin);
fs.writeFileSync(vars, text, { mode: 0o600 });
fs.writeFileSync(keys,
  "# Development signing keys for the simulator (matching the vars beside them). Not secret beyond this machine.\n" +
  "TELNYX_PRIVATE_SEED=" + seed + "\n", { mode: 0o600 });
' "$VARS" "$KEYS"
echo "dev: created $VARS (ADMIN_TOKEN is in it); the matching development signing key is in $KEYS"
ports
