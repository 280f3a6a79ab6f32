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
	@command -v dot >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		(apt-get install -y -q graphviz >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q graphviz >/dev/null 2>&1)); } || \
		echo "graphviz's dot is not installed: the tape picture stays DOT source"
	$(BIN)/python examples/multimodal.py

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check tapegrad tests examples benchmarks
	$(BIN)/mypy
	@wc -l tapegrad/_autodiff/*.py | tail -n 1 | awk '{print "engine (tapegrad/_autodiff): " $$1 " lines"}'

bench: $(STAMP)
	@$(PIP) install -q "jax[cpu]" >/dev/null 2>&1 || echo "JAX did not install: its column stays empty"
	$(BIN)/python benchmarks/suite.py --blas-env

clean:
	rm -rf $(VENV) build *.egg-info
