# The two commands a user needs: `make demo` and `make test`. Everything else here serves them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FRONTEND_STAMP := frontend/dist/index.html

LOCK := requirements.lock

.PHONY: demo test lint install lock audit frontend generate services clean

# Every dependency comes from the lock, each file checked against its hash; the project itself adds
# none of its own (--no-deps), so nothing unpinned gets in.
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Regenerate the lock from pyproject.toml's ranges, keeping the pins that still satisfy them
# (LOCK_FLAGS=--upgrade moves every pin to the newest allowed). pip's own configuration supplies
# the indexes, so this machine's CPU torch wheel is the one whose hash is recorded.
# --no-strip-extras: a dependency asked for with extras (pip-audit's cachecontrol[filecache]) must be
# locked with them, or a fresh venv's pip --require-hashes resolves it afresh and refuses it.
lock:
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/pip-compile || $(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --generate-hashes --allow-unsafe --no-strip-extras \
		--extra server --extra peer --extra dev --no-emit-index-url --no-emit-find-links \
		$(LOCK_FLAGS) --output-file $(LOCK) pyproject.toml

# Known vulnerabilities in the locked versions; skips with a message where the advisory service
# cannot be reached (see docs/security.md).
audit: install
	$(BIN)/python .ci/audit.py $(LOCK)

frontend: $(FRONTEND_STAMP)

$(FRONTEND_STAMP): $(shell find frontend -path frontend/node_modules -prune -o -path frontend/dist -prune -o -type f -print 2>/dev/null)
	.ci/ensure-node
	cd frontend && npm ci --no-audit --no-fund && npm run build

# The dashboard's TypeScript models and API client from the server's code (commit the result;
# tests/browser/test_generated_types.py checks it is current).
generate: install
	.ci/ensure-node
	$(BIN)/python frontend/scripts/export_schemas.py
	cd frontend && { test -d node_modules || npm ci --no-audit --no-fund; } && npm run --silent generate

demo: install frontend
	$(BIN)/swarmhub demo --peers 4 --stages 2 --keep-serving

services:
	.ci/ensure-services

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The fast tests on both cores first; then the multi-process swarms and the browser, one at a time
# (each swarm already keeps both cores busy, and their timeouts assume it has them).
TEST_ENV := SWARMHUB_TEST_POSTGRES_URL=$${SWARMHUB_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test} \
	SWARMHUB_TEST_REQUIRE_ALL=1

test: install frontend services lint audit
	$(TEST_ENV) $(BIN)/pytest -m 'not slow and not browser' -n 2 -p no:cacheprovider --durations=10
	$(TEST_ENV) $(BIN)/pytest -m 'slow or browser' -p no:cacheprovider --durations=30

clean:
	rm -rf $(VENV) frontend/node_modules frontend/dist var test-artifacts
