# make demo / make test work on a fresh machine: they build .venv (and the test-only upstream oracle venv).
PYTHON ?= python3.11
VENV := .venv
ORACLE_VENV := .venv-oracle
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?=

.PHONY: install oracle test demo lint format bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e ".[eval,dataplane,dev]"
	touch $@

# The upstream mineru-html package, as a test oracle only: it needs selectolax<1.0 (we use >=1.0) and its
# __init__ pulls torch/transformers, which the oracle runner sidesteps, so only its processing deps are installed.
oracle: $(ORACLE_VENV)/.installed

$(ORACLE_VENV)/.installed:
	$(PYTHON) -m venv $(ORACLE_VENV)
	$(ORACLE_VENV)/bin/pip install -q --upgrade pip
	$(ORACLE_VENV)/bin/pip install -q --no-deps "mineru-html==1.1.2"
	$(ORACLE_VENV)/bin/pip install -q "selectolax<1.0" lxml beautifulsoup4 pydantic
	touch $@

test: install oracle
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

demo: install
	$(VENV)/bin/python scripts/demo.py

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: install oracle
	$(VENV)/bin/python bench/simplify.py

clean:
	rm -rf $(VENV) $(ORACLE_VENV) out .pytest_cache
