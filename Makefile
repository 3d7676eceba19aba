# minitransformer developer commands.
#
#   make demo   build .venv with the package, run demos/$(DEMO).py
#   make test   build .venv with the [all] extras, run the test suite (fast kernels, then the model-level tests with the reference kernels)
#   make book   build .venv with the book's tools, then the book into site/ (python -m http.server -d site)
#   make book-check  open every page of the book in headless Chromium; screenshots in build/book-check/
#   make clean  remove .venv and build/test caches
#
# Knobs (set on the command line, e.g. `make test PYTEST_ARGS="-k attention"`):
#   PYTHON       interpreter used to create the venv (default: python3, needs >= 3.10)
#   VENV         where the virtualenv lives (default: .venv)
#   DEMO         which demo `make demo` runs: molecules (default), tox21_property, canonicalize
#   ARGS         extra arguments for the demo
#   PYTEST_ARGS  extra arguments for pytest
#   WORKERS      test processes (pytest-xdist; default: auto, one per CPU core)
#   PIP_ARGS     extra arguments for `pip install`

PYTHON      ?= python3
VENV        ?= .venv
DEMO        ?= molecules
ARGS        ?=
PYTEST_ARGS ?=
WORKERS     ?= auto
PIP_ARGS    ?=

VENV_PY := $(VENV)/bin/python

# Tox21 lives outside the repository, in ../shared/data on our machines.
# Point the code at it unless the caller already chose a location.
SHARED_DATA := ../shared/data
ifeq ($(strip $(MINITRANSFORMER_DATA)),)
  ifneq ($(wildcard $(SHARED_DATA)/.),)
    export MINITRANSFORMER_DATA := $(abspath $(SHARED_DATA))
  endif
endif

.DEFAULT_GOAL := help
.PHONY: help demo test book book-check clean

help:
	@sed -n 's/^#   //p' $(firstword $(MAKEFILE_LIST))

demo: $(VENV)/.installed-demo
	$(VENV_PY) demos/$(DEMO).py $(ARGS)

# The suite runs with the fast kernels (the default); then the tests of what runs the
# kernels (layers, models, gradient checks, decoding, training, steering, data parallelism)
# run again with the plain reference kernels, so each of them holds for both sets.
# The rest (commands, files, chemistry) does not depend on the kernel set, and
# tests/fast compares the two sets itself.
REFERENCE_TESTS := tests/nn tests/models tests/gradcheck tests/generate tests/train tests/optim tests/molecules \
                   tests/test_learning.py tests/test_distributed.py

# The files are shared among $(WORKERS) processes (pytest-xdist), each file's tests in one
# of them, so that a file's module fixtures (a quick training run) are made once.
PYTEST := $(VENV_PY) -m pytest -n $(WORKERS) --dist loadfile

test: $(VENV)/.installed-test
	MINITRANSFORMER_KERNELS=fast $(PYTEST) $(PYTEST_ARGS)
	MINITRANSFORMER_KERNELS=reference $(PYTEST) $(REFERENCE_TESTS) $(PYTEST_ARGS)

# The book: MkDocs with the Material theme (docs/book.md), its pages from the tree as it is;
# dated by the last commit, so that two builds of one commit give the same files. --strict:
# a broken link or picture, or a formula MathJax would reject, stops the build.
book: $(VENV)/.installed-book
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) NO_MKDOCS_2_WARNING=1 \
	  $(VENV_PY) -m mkdocs build --strict --clean --site-dir site
	@echo "the book is in site/: read it with $(VENV_PY) -m http.server -d site, then http://localhost:8000"

book-check: book
	$(VENV_PY) docs/book/check.py site --screenshots build/book-check

# The bare virtualenv. Checked for the Python version first so an old python3
# fails here with a clear message rather than deep inside pip.
$(VENV_PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
	  { echo "error: minitransformer needs Python >= 3.10; '$(PYTHON)' is $$($(PYTHON) -V 2>&1). Try: make $(MAKECMDGOALS) PYTHON=python3.12" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Stamp files: the editable install is redone only when the packaging changes.
# The package itself is installed in editable mode, so code edits need no reinstall.
$(VENV)/.installed-demo: setup.cfg pyproject.toml | $(VENV_PY)
	$(VENV_PY) -m pip install $(PIP_ARGS) -e '.[fast,parallel]'
	@touch $@

$(VENV)/.installed-test: setup.cfg pyproject.toml docs/book/mathjax.py | $(VENV_PY)
	$(VENV_PY) -m pip install $(PIP_ARGS) -e '.[all]'
	$(VENV_PY) docs/book/mathjax.py
	@touch $@

# The book's tools, and MathJax (a checked wheel's files, not installed as a package).
$(VENV)/.installed-book: setup.cfg pyproject.toml docs/book/mathjax.py | $(VENV_PY)
	$(VENV_PY) -m pip install $(PIP_ARGS) -e '.[book]'
	$(VENV_PY) docs/book/mathjax.py
	@touch $@

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
