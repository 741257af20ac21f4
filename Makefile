# jitwatch — the two commands a new user needs:
#   make demo   # builds .venv (torch 2.13, Triton 3.9, jitwatch) and runs `jitwatch demo`
#               # (torch's CPU build only where pip is pointed at one: README.md, Quick start)
#   make test   # lint + every test tier this machine can run (what CI runs)
# Everything installs from package registries; nothing else is needed on a fresh machine
# with Python 3.10+ (and, for the Prometheus and Redis tiers, Debian's apt for prometheus/redis-server).

PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
TRITON ?= triton==3.9.0
TRITON_OLD ?= triton==3.6.0
PIP := PIP_DISABLE_PIP_VERSION_CHECK=1 $(BIN)/pip
ARGS ?=
PYTEST_ARGS ?=

.PHONY: demo test lint test-quick test-core test-triton36 test-vllm test-dsl dsl-env tools env clean bench-smoke

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH)" "$(TRITON)"
	$(PIP) install -q -e ".[demo,dev]"
	touch $@

demo: env
	$(BIN)/jitwatch demo $(ARGS)

lint: env
	$(BIN)/ruff format --check jitwatch tests benchmarks dashboards
	$(BIN)/ruff check jitwatch tests benchmarks dashboards
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m jitwatch.views.contract_doc --check
	$(BIN)/python dashboards/grafana/generate.py --check
	$(BIN)/python -m jitwatch.cli.cli_doc --check

# Prometheus/promtool and redis-server from Debian's packages, unpacked under .tools/ (no daemon started).
tools:
	bash scripts/install-prometheus.sh
	bash scripts/install-redis.sh

test-core: env tools
	JITWATCH_TEST_TOOLS_REQUIRED=1 PATH="$(CURDIR)/.tools/prometheus/usr/bin:$$PATH" $(BIN)/pytest -m "not vllm and not gpu and not dsl" $(PYTEST_ARGS)

# The quick loop while developing: no slow, Prometheus, vLLM or GPU tests.
test-quick: env
	$(BIN)/pytest -m "not slow and not prometheus and not vllm and not gpu and not dsl" $(PYTEST_ARGS)

# The hook/monitor/field-case tests again under the oldest supported Triton.
.venv-triton36/.installed: pyproject.toml
	$(PY) -m venv .venv-triton36
	PIP_DISABLE_PIP_VERSION_CHECK=1 .venv-triton36/bin/pip install -q "$(TORCH)" "$(TRITON_OLD)"
	PIP_DISABLE_PIP_VERSION_CHECK=1 .venv-triton36/bin/pip install -q -e ".[dev]" numpy
	touch $@

test-triton36: .venv-triton36/.installed
	.venv-triton36/bin/pytest -p no:cacheprovider -m "not vllm and not gpu and not prometheus and not dsl" tests/backends tests/core tests/test_config.py tests/test_redact.py tests/test_importhook.py $(PYTEST_ARGS)

.venv-vllm/.installed: pyproject.toml scripts/make-vllm-env.sh
	bash scripts/make-vllm-env.sh .venv-vllm
	touch $@

test-vllm: .venv-vllm/.installed
	.venv-vllm/bin/pytest -m vllm tests/integrations/vllm_plugin $(PYTEST_ARGS)

# The DSL backends against their real libraries (CuTeDSL, TileLang) on this CPU machine; absence fails.
.venv-dsl/.installed: scripts/make-dsl-env.sh | env
	bash scripts/make-dsl-env.sh .venv-dsl/site
	touch $@

dsl-env: .venv-dsl/.installed

test-dsl: .venv-dsl/.installed
	JITWATCH_TEST_DSL_REQUIRED=1 $(BIN)/pytest -m "dsl and not gpu" $(PYTEST_ARGS)
	OTEL_SDK_DISABLED=true $(BIN)/python benchmarks/bench_install_import.py --reps 1 --lib-reps 1 >/dev/null  # smoke: it must run

# Every benchmark for a few seconds (no timing asserts): benchmarks never rot.
bench-smoke: env
	PYTHON=$(BIN)/python bash benchmarks/smoke.sh

test: lint test-core test-triton36 test-vllm bench-smoke test-dsl

clean:
	rm -rf $(VENV) .venv-triton36 .venv-vllm .venv-dsl .tools
