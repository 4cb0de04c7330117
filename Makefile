# Set-up and jobs. Both targets build .venv at the repo root when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STAMP_DEV := $(VENV)/.installed-dev

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# dp's and CDynP's kernels compiled ahead of time (chainpipe/solvers/label_aot.py: the
# label, period and prefix kernels, and the CDynP agents' cdynp_period and cdynp_local units;
# a process then solves without importing numba; a no-op when built for the kernels'
# sources, else about 115 s of CPU with a C compiler, the units built side by side on the
# cores: 122 s of wall time against 173 s one by one at load 2.5). The leading '-':
# without a compiler the solvers run on numba's JIT
AOT := -$(BIN)/python -m chainpipe.solvers.label_aot
# the package's bytecode written once: where PYTHONDONTWRITEBYTECODE is set (as on the
# project's machines) every process compiled each module it imported, a solve's lazy
# imports included (2 to 4 % of a v3/large solve's CPU); a stale file is never used
PYC := $(BIN)/python -m compileall -q chainpipe

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(AOT)
	$(PYC)
	touch $@

# Megatron-Core without its dependencies (PyTorch, ...): the tests run its own
# PipelineParallelLayerLayout on every layout `chainpipe export --to megatron` writes
MEGATRON_CORE := megatron-core>=0.13

$(STAMP_DEV): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps '$(MEGATRON_CORE)'
	$(AOT)
	$(PYC)
	touch $(STAMP) $@

demo: $(STAMP)
	$(AOT)
	$(PYC)
	$(BIN)/python -m chainpipe.demo

test: $(STAMP_DEV)
	$(BIN)/ruff check chainpipe tests benchmarks experiments
	$(AOT)
	$(PYC)
	$(BIN)/python -m pytest -n 2 --nbmake tests notebooks

lint: $(STAMP_DEV)
	$(BIN)/ruff check chainpipe tests benchmarks experiments

clean:
	rm -rf $(VENV) build *.egg-info
