# The two commands of the README: `make dev` and `make test`. Both install what is missing first.
# `make check` is the quick inner loop: formatting, lints, unit tests (native and wasm32), no worker.
.PHONY: setup setup-serve build dev test scale check bench profile fuzz clean

# Cargo's build cache lives outside the clone, so another clone (or a fresh one) on the same machine
# reuses what was built; set CARGO_TARGET_DIR to put it elsewhere.
export CARGO_TARGET_DIR ?= $(or $(HOME),/tmp)/.cache/exactly/target

# Everything the tests need; `setup-serve` only what building and serving need.
setup:
	@sh scripts/setup.sh

setup-serve:
	@sh scripts/setup.sh serve

build: setup-serve
	@sh scripts/build-worker.sh
	@sh scripts/build-console.sh

dev: build
	@sh scripts/dev.sh

check: setup
	@sh scripts/check.sh

test: setup build
	@sh scripts/build-worker.sh e2e
	@sh scripts/test.sh

# The scale suite (docs/testing.md): one message to 1,000 endpoints, a recovery of 1,000,000
# events, retention from 1,000,000 expired rows a database and the cron with eight databases, in
# the sharded layout, with Cloudflare's limits enforced. `.ci/run` runs it after `make test`.
scale: setup build
	@sh scripts/build-worker.sh e2e
	@E2E_SCALE=1 E2E_SCALE_ROWS=1000000 E2E_SHARDED=1 cargo test -q -p exactly-tests --test e2e -- --test-threads 2 scale::

bench:
	@python3 scripts/bench.py

# A CPU profile of the worker under the bench's load: top functions by self time, wasm named.
profile:
	@python3 scripts/profile.py

fuzz:
	@sh scripts/fuzz.sh

clean:
	rm -rf target edge/build edge/build-e2e bench/wasm-floor/build bench/wasm-floor/build-core .wrangler "$(CARGO_TARGET_DIR)" "$(HOME)/.cache/exactly/e2e"
