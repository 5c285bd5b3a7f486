#!/bin/sh
# Builds the browser console into console/dist (the static assets `wrangler dev --assets` and
# deploy serve under /console): Preact + htm from console/package-lock.json, bundled with the
# project's pinned esbuild into one file. Nothing is fetched at run time: no CDN.
set -eu
cd "$(dirname "$0")/.."
OUT=console/dist
STAMP="$OUT/console/app.js"
if [ -f "$STAMP" ] && [ -z "$(find console/src console/index.html console/console.css console/_headers console/package-lock.json clients/typescript/index.ts clients/typescript/schema.d.ts package-lock.json scripts/build-console.sh -newer "$STAMP" -type f 2>/dev/null | head -n 1)" ]; then
    echo "build: console up to date"
    exit 0
fi
if ! [ console/node_modules/.package-lock.json -nt console/package-lock.json ]; then
    (cd console && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
echo "build: console (esbuild bundle into $OUT)"
rm -rf "$OUT"
mkdir -p "$OUT/console"
node_modules/.bin/esbuild console/src/main.js --bundle --format=esm --minify --target=es2020 \
    --legal-comments=none --log-level=warning --outfile="$OUT/console/app.js"
cp console/index.html console/console.css "$OUT/console/"
cp console/_headers "$OUT/_headers"
