# The two commands a user needs: `make demo` and `make test`. Everything else here serves them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FRONTEND_STAMP := frontend/dist/index.html

.PHONY: demo test lint install frontend services clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[server,peer,dev]'
	touch $(STAMP)

install: $(STAMP)

frontend: $(FRONTEND_STAMP)

$(FRONTEND_STAMP): $(shell find frontend -path frontend/node_modules -prune -o -path frontend/dist -prune -o -type f -print 2>/dev/null)
	.ci/ensure-node
	cd frontend && npm ci --no-audit --no-fund && npm run build

demo: install frontend
	$(BIN)/swarmhub demo --peers 4 --stages 2 --keep-serving

services:
	.ci/ensure-services

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: install frontend services lint
	SWARMHUB_TEST_POSTGRES_URL=$${SWARMHUB_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test} \
	SWARMHUB_TEST_REQUIRE_ALL=1 \
	$(BIN)/pytest -m '' -p no:cacheprovider

clean:
	rm -rf $(VENV) frontend/node_modules frontend/dist var test-artifacts
