#!/bin/sh
# Generates the Python client's package, clients/python/exactly_client, from docs/openapi.json
# with openapi-python-client and ruff at the versions clients/python/generator/requirements.txt
# pins (one document always generates the same code). The package is a build output, as the
# TypeScript client's dist/ is: generate it, then `pip install clients/python`.
#   sh scripts/python-client.sh          installs the generator into .tools/pygen when its pins
#                                        changed (scripts/setup.sh runs this part), then generates
#   sh scripts/python-client.sh install  only the first part
set -eu
cd "$(dirname "$0")/.."
GEN=clients/python/generator
VENV=.tools/pygen
if cmp -s "$GEN/requirements.txt" "$VENV/requirements.txt" 2>/dev/null; then
    [ "${1:-}" = install ] && echo "setup: python client's generator (installed)"
else
    echo "setup: python client's generator ($GEN/requirements.txt into $VENV)"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    PIP_ROOT_USER_ACTION=ignore "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$GEN/requirements.txt"
    cp "$GEN/requirements.txt" "$VENV/requirements.txt"
fi
[ "${1:-}" = install ] && exit 0
OUT=clients/python/exactly_client
LOG=$(mktemp "${TMPDIR:-/tmp}/exactly-pyclient.XXXXXX")
trap 'rm -f "$LOG"' EXIT
# ruff, which formats the output, is found on PATH; no cache is left in the package.
if ! RUFF_NO_CACHE=true PATH="$PWD/$VENV/bin:$PATH" "$VENV/bin/openapi-python-client" generate \
    --path docs/openapi.json --config "$GEN/config.yaml" --custom-template-path "$GEN/templates" \
    --meta none --output-path "$OUT" --overwrite >"$LOG" 2>&1; then
    cat "$LOG"
    exit 1
fi
# The typed-package marker (PEP 561), which --meta none leaves out.
touch "$OUT/py.typed"
echo "python-client: generated $OUT from docs/openapi.json"
