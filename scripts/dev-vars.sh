#!/bin/sh
# Creates .dev.vars from .dev.vars.example when it is missing, with a new development Ed25519
# key pair (the public half goes into .dev.vars, the private seed into .dev.keys, read by sim)
# and a random ADMIN_TOKEN.
set -eu
cd "$(dirname "$0")/.."
if [ -f .dev.vars ]; then
    echo "dev: .dev.vars exists (kept); simulator keys in $PWD/.dev.keys"
    exit 0
fi
node -e '
const { generateKeyPairSync } = require("crypto");
const fs = require("fs");
const { publicKey, privateKey } = generateKeyPairSync("ed25519");
const pub = publicKey.export({ format: "der", type: "spki" }).subarray(-32).toString("base64");
const seed = privateKey.export({ format: "der", type: "pkcs8" }).subarray(-32).toString("base64");
const admin = require("crypto").randomBytes(24).toString("hex");
const vars = fs.readFileSync(".dev.vars.example", "utf8")
  .replace(/^TELNYX_PUBLIC_KEY=.*$/m, "TELNYX_PUBLIC_KEY=" + pub)
  .replace(/^ADMIN_TOKEN=.*$/m, "ADMIN_TOKEN=" + admin);
fs.writeFileSync(".dev.vars", vars, { mode: 0o600 });
fs.writeFileSync(".dev.keys",
  "# Development signing keys for the simulator (matching .dev.vars). Not secret beyond this machine.\n" +
  "TELNYX_PRIVATE_SEED=" + seed + "\n", { mode: 0o600 });
'
echo "dev: created .dev.vars (ADMIN_TOKEN is in it); the matching development signing key is in $PWD/.dev.keys"
