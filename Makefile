# The two commands a fresh machine needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip

.PHONY: demo test lint bench clean install

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[test,dev,examples]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/multimodal.py

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check tapegrad tests examples benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/overhead.py

clean:
	rm -rf $(VENV) build *.egg-info
