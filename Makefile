# Two commands on a fresh machine: `make serve` and `make test`. Both set everything up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.proctor-installed
# Extras the test suite uses; `make serve` needs only the base package.
TEST_EXTRAS ?= dev,train
# verl's own code that tests and bench/ run (its SandboxFusion client): the wheel without its dependencies (ray,
# torch, vllm ...), which pip extras cannot express; those modules import only the standard library and requests.
VERL_VERSION ?= 0.9.1
PYTEST_ARGS ?= --durations=30
# Where `make docs` serves the site (the service itself takes port 8000).
DOCS_ADDR ?= 127.0.0.1:8001

# Where the machine carries local wheels (a CPU torch build), pip takes them instead of the multi-GB CUDA build.
ifneq ($(wildcard /opt/wheels/*.whl),)
export PIP_FIND_LINKS := /opt/wheels
endif

.PHONY: setup system-packages serve test docs lint format bench clean images

system-packages:
	@bash scripts/system-packages.sh

$(STAMP): pyproject.toml Makefile scripts/system-packages.sh scripts/apt-packages.txt
	@bash scripts/system-packages.sh
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --upgrade pip setuptools wheel
	@# With the local CPU build installed first, torch's version range is met and pip fetches no CUDA build.
	@if ls /opt/wheels/torch-*.whl >/dev/null 2>&1; then \
		$(BIN)/python -m pip install -q --disable-pip-version-check /opt/wheels/torch-*.whl; fi
	$(BIN)/python -m pip install -q --disable-pip-version-check -e ".[$(TEST_EXTRAS)]"
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps "verl==$(VERL_VERSION)"
	@touch $(STAMP)

setup: $(STAMP)

serve: setup
	$(BIN)/proctor serve

# The static checks first (lint), then the site's strict build, then the suite.
test: lint
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml), served with live reload; `make test` builds it with --strict.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr $(DOCS_ADDR)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/pyright

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: setup
	$(BIN)/python bench/service.py
	$(BIN)/python bench/math_verifier.py
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/verl_sandbox.py
	$(BIN)/python bench/code.py
	$(BIN)/python bench/sql.py
	$(BIN)/python bench/verilog.py
	$(BIN)/python bench/judge.py
	$(BIN)/python bench/puzzles.py
	$(BIN)/python bench/trainer.py

# The Docker images (docs/deployment.md): the service from the committed tree (git archive: no .venv in the
# context), then the sandboxes' toolchains on top of it. Needs a docker daemon and a network; not part of `make test`.
IMAGE_TAG ?= latest
images:
	set -o pipefail; git archive --format=tar HEAD | docker build -f docker/Dockerfile -t proctor:$(IMAGE_TAG) -
	docker build -f docker/toolchains.Dockerfile --build-arg SERVICE_IMAGE=proctor:$(IMAGE_TAG) \
		-t proctor-toolchains:$(IMAGE_TAG) docker/

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
