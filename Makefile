# Two commands for a newcomer: `make demo` and `make test`.
# Each creates .venv if it is missing and installs what it needs: `make demo` the
# runtime (requirements.txt), `make test` also the test tools (requirements-dev.txt).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# Two stamps: RUN_STAMP = what the demo needs (requirements.txt and the package);
# DEV_STAMP = that plus the test tools (requirements-dev.txt). `make test` builds RUN_STAMP
# first, so either command may come first on a fresh clone.
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# A third, for the documentation site's tools (requirements-docs.txt: Sphinx, MyST-NB, ...):
# only `make docs` (and so `make test`) installs them; `make demo` never does.
DOCS_STAMP := $(VENV)/.installed-docs
DOCS_OUT   := build/docs

.PHONY: demo test test-cpu-kinds lint doctest pytest notebooks bench clean docs docs-check \
	docs-serve conformance conformance-step

$(PY):
	$(PYTHON) -m venv $(VENV)

$(RUN_STAMP): $(PY) requirements.txt pyproject.toml
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP) requirements-dev.txt
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(DEV_STAMP)

$(DOCS_STAMP): $(DEV_STAMP) requirements-docs.txt
	$(PY) -m pip install --quiet -r requirements-docs.txt
	touch $(DOCS_STAMP)

# One BLAS thread: the toy model's matrices are tiny, and OpenBLAS's threads made
# training ~4x slower on a 2-core machine (benchmarks/train_speed.py).
ONE_THREAD := OPENBLAS_NUM_THREADS=1

demo: $(RUN_STAMP)
	$(ONE_THREAD) $(PY) -m ppo_numpy demo

lint: $(DEV_STAMP)
	$(PY) -m ruff check ppo_numpy tests benchmarks examples docs/site

doctest: $(DEV_STAMP)
	$(ONE_THREAD) $(PY) -m pytest -q --doctest-modules ppo_numpy

# pytest checks the built site in a browser (tests/test_docs_site.py), so it builds it first.
# The files run in parallel (pytest-xdist), one worker per core, all the tests of a file in the
# same worker: each notebook is executed once (tests/test_notebooks.py and
# tests/test_notebooks_half.py, half of the notebooks each) and a module's
# fixtures are built once. TEST_WORKERS=0 runs everything in this process.
TEST_WORKERS ?= auto
pytest: $(DEV_STAMP) docs
	$(ONE_THREAD) $(PY) -m pytest -q --durations=5 -n $(TEST_WORKERS) --dist loadfile tests

test: lint doctest pytest

# The numeric test files again as each CPU kind narrower than this machine (AVX2 with
# OpenBLAS's Haswell kernel on an AVX-512 machine, then SSE4.2 with Nehalem's and two BLAS
# threads): NumPy's NPY_DISABLE_CPU_FEATURES and OPENBLAS_CORETYPE (tests/cpu_kinds.py,
# docs/testing.md). Where NumPy dispatches nothing beyond its baseline it says so and passes.
test-cpu-kinds: $(DEV_STAMP)
	$(PY) -m tests.cpu_kinds

notebooks: $(DEV_STAMP)
	$(ONE_THREAD) $(PY) -m tests.notebook_runner --write notebooks/*.ipynb

# The site: docs/*.md, the notebooks (stored outputs) and the API reference, rebuilt from
# scratch into build/docs/html with warnings as errors (docs/site/build.py).
docs: $(DOCS_STAMP)
	$(ONE_THREAD) $(PY) docs/site/build.py $(DOCS_OUT)

# Every page opened in headless Chromium (apt-get install -y chromium): rendered, math
# typeset, images loaded, internal links resolve; screenshots in build/docs/screenshots.
docs-check: docs
	$(PY) -m tests.site_check $(DOCS_OUT)/html

# Read the site at http://127.0.0.1:8000/
docs-serve: docs
	$(PY) -m http.server --bind 127.0.0.1 --directory $(DOCS_OUT)/html 8000

# Every preset against its framework's released code (verl, OpenRLHF, TRL 1.16, TRL 0.11.4)
# in a separate environment, .venv-conformance, from requirements-conformance.txt: CPU torch
# and the light imports first, then the frameworks with --no-deps, legacy TRL into its own
# directory. Writes docs/conformance.md; fails naming each preset (and output) that differs.
CVENV   := .venv-conformance
CPY     := $(CVENV)/bin/python
CSTAMP  := $(CVENV)/.installed
CREQ    := requirements-conformance.txt

$(CSTAMP): $(CREQ)
	@test -x $(CPY) || $(PYTHON) -m venv $(CVENV)
	$(CPY) -m pip install --quiet $$(sed -n '1,/^# --no-deps/p' $(CREQ) | grep -v '^#')
	$(CPY) -m pip install --quiet --no-deps $$(sed -n '/^# --no-deps/,/^# --target/p' $(CREQ) | grep -v '^#')
	$(CPY) -m pip install --quiet --no-deps --upgrade --target $(CVENV)/trl-0.11.4 $$(sed -n '/^# --target/,$$p' $(CREQ) | grep -v '^#')
	touch $(CSTAMP)

conformance: $(CSTAMP)
	$(ONE_THREAD) $(CPY) -m tests.conformance.run

# One optimizer step across 2 gloo ranks on loopback (torch.distributed, started and joined
# by the run), verl's and TRL's loss normalisation against ppo_numpy.policy_step
# (tests/conformance/step_distributed.py; run_step_conformance for the conformance run).
conformance-step: $(CSTAMP)
	$(ONE_THREAD) $(CPY) -m tests.conformance.step_distributed

bench: $(RUN_STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) $(CVENV)
