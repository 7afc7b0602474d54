# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
PROVIDER := tests/sso/provider
PROVIDER_INSTALLED := $(PROVIDER)/node_modules/.package-lock.json

.PHONY: install demo test lint serve clean

$(INSTALLED): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --editable '.[dev]'
	touch $(INSTALLED)

# The OpenID provider the sign-in tests run (npm's oidc-provider, pinned by its package-lock.json).
$(PROVIDER_INSTALLED): $(PROVIDER)/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix $(PROVIDER) --no-audit --no-fund; \
	else echo "npm is missing: the sign-in tests (tests/sso) will skip"; fi

install: $(INSTALLED)  ## Create .venv and install MAD Arena with its test tools

demo: $(INSTALLED)  ## The digits competition end to end, served at http://127.0.0.1:8000 (ARGS=--simulate)
	MAD_DATA_DIR=$${MAD_DATA_DIR:-demo-data} $(BIN)/mad demo $(ARGS)

# In parallel processes (pytest-xdist) when the run covers a directory: tests/conftest.py says how many.
test: $(INSTALLED) $(PROVIDER_INSTALLED)  ## Run every test on SQLite and on the Postgres at 127.0.0.1:5432
	$(BIN)/pytest -n auto --dist loadfile $(ARGS)

lint: $(INSTALLED)  ## ruff, and the mypy type check of app/ and workers/
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache $(PROVIDER)/node_modules
