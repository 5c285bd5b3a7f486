# The two commands of the README: `make dev` and `make test`. Both install what is missing first.
.PHONY: setup build dev test bench profile fuzz clean

setup:
	@sh scripts/setup.sh

build: setup
	@sh scripts/build-worker.sh
	@sh scripts/build-console.sh

dev: build
	@sh scripts/dev.sh

test: build
	@sh scripts/build-worker.sh e2e
	@sh scripts/test.sh

bench:
	@python3 scripts/bench.py

# A CPU profile of the worker under the bench's load: top functions by self time, wasm named.
profile:
	@python3 scripts/profile.py

fuzz:
	@sh scripts/fuzz.sh

clean:
	rm -rf target edge/build edge/build-e2e .wrangler
