# Two commands set everything up on a fresh machine with Python 3.11 and pip: `make demo`, `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest's workers (pytest-xdist), a test file each at a time: measured on 2 cores, the whole
# suite 508 s with one process, 242 s with two.
WORKERS ?= 2

.PHONY: install demo test check lint fmt bench bench-stream chaos image clean docs site reference

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# the distribution was called agent-reach before 0.2 (the name of another project on PyPI)
	$(BIN)/pip uninstall --quiet --yes agent-reach 2>/dev/null || true
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/agent-reach demo

test: $(STAMP)
	scripts/ensure-services.sh
	scripts/ensure-agents.sh
	scripts/ensure-sdk-suites.sh
	$(BIN)/pytest -q -n $(WORKERS) --dist loadfile

# The quick loop (about a minute): lint, types and every test that needs nothing but Python (no
# agent-reach process, redis-server, browser, agent CLI or container: pyproject's markers).
check: lint
	$(BIN)/pytest -q -n $(WORKERS) --dist loadfile -m "not (e2e or agents or container or redis or browser)"

# The documentation site (mkdocs.yml): `make docs` serves it on http://127.0.0.1:8001 as you
# edit, `make site` builds it into site/ as the suite does, `make reference` rewrites the pages
# generated from the code (docs/reference/).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8001

site: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean

reference: $(STAMP)
	$(BIN)/python scripts/reference.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples deploy scripts
	$(BIN)/ruff format --check src tests bench examples deploy scripts
	$(BIN)/mypy

fmt: $(STAMP)
	$(BIN)/ruff format src tests bench examples deploy scripts
	$(BIN)/ruff check --fix src tests bench examples deploy scripts

bench: $(STAMP)
	$(BIN)/python bench/failover.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/peers
	$(BIN)/python bench/floor.py
	$(BIN)/python bench/state_overhead.py
	$(BIN)/python bench/hedging.py
	$(BIN)/python bench/ingress.py
	$(BIN)/python bench/abuse.py
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/tracing.py
	$(BIN)/python bench/rescue.py
	$(BIN)/python bench/stream.py
	$(BIN)/python bench/agent_session.py
	$(BIN)/python bench/cache_affinity.py

# BEFORE=REV: an older commit's agent-reach measured beside this tree's (bench/common.py).
bench-stream: $(STAMP)
	$(BIN)/python bench/stream.py $(if $(BEFORE),--before $(BEFORE))

chaos: $(STAMP)
	$(BIN)/python bench/chaos.py --seconds 120 $(if $(BEFORE),--before $(BEFORE))

# The container image from Debian packages and PyPI only (deploy/image/build.py): dist/agent-reach-
# VERSION.oci.tar and .docker.tar; layers and .debs are kept in .cache/image/. Needs root.
image: $(STAMP)
	scripts/ensure-services.sh image
	$(BIN)/python deploy/image/build.py

clean:
	rm -rf $(VENV) build dist site .cache .pytest_cache .mypy_cache .ruff_cache
