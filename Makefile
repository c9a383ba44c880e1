# Two commands on a fresh machine (Python 3.11 and Java 17):
#   make run    the main job on its embedded defaults
#   make test   lint, types, docs and the whole test suite (what CI runs)
# Both build .venv from pyproject.toml first.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HYPOTHESIS_PROFILE ?= ci
PYTEST_ARGS ?=

.PHONY: run test lint typecheck docs pytest thorough protos bench clean build chromium graphviz

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The linearizability search compiled with Cython (optional: without a C compiler the same file
# runs as plain Python).  Rebuilt whenever invariants/_wgl.py changed since the last build.
build: $(STAMP)
	$(BIN)/python setup.py --quiet build_ext --inplace

run: build
	$(BIN)/txnmodel run

test: lint typecheck docs pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy spec reference invariants proofs engine history_io views txnclient runners recording devtools txnmodel

# The docs' diagrams are drawn by Graphviz at build time (scripts/mkdocs_diagrams.py); installed when missing.
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "== installing graphviz (Debian) to draw the docs' diagrams"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; \
	}

docs: $(STAMP) graphviz
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

pytest: build chromium
	HYPOTHESIS_PROFILE=$(HYPOTHESIS_PROFILE) $(BIN)/python -m pytest -n 2 -q $(PYTEST_ARGS)

# The viewer's browser tests drive Debian's Chromium (tests/views); installed when missing.
# TXNMODEL_CHROMIUM names another binary.  Without one the browser tests fail, they never skip.
CHROMIUM ?= $(or $(TXNMODEL_CHROMIUM),/usr/bin/chromium)
chromium:
	@test -x $(CHROMIUM) || { \
	  echo "== installing chromium (Debian) for the viewer's browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	}

thorough: build chromium
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -n 2 -q $(PYTEST_ARGS)

protos: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python scripts/gen_protos.py

bench: build
	for script in benchmarks/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis invariants/_wgl.c invariants/_wgl.*.so
