# Two commands for a newcomer: `make demo` and `make test`.
# Each creates .venv if it is missing and installs what it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test lint doctest pytest notebooks bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) requirements.txt requirements-dev.txt pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# One BLAS thread: the toy model's matrices are tiny, and OpenBLAS's threads made
# training ~4x slower on a 2-core machine (benchmarks/train_speed.py).
ONE_THREAD := OPENBLAS_NUM_THREADS=1

demo: $(STAMP)
	$(ONE_THREAD) $(PY) -m ppo_numpy demo

lint: $(STAMP)
	$(PY) -m ruff check ppo_numpy tests benchmarks examples

doctest: $(STAMP)
	$(ONE_THREAD) $(PY) -m pytest -q --doctest-modules ppo_numpy

pytest: $(STAMP)
	$(ONE_THREAD) $(PY) -m pytest -q --durations=5 tests

test: lint doctest pytest

notebooks: $(STAMP)
	$(ONE_THREAD) $(PY) -m tests.notebook_runner --write notebooks/*.ipynb

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV)
