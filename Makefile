# keras-transformer: `make demo` trains, translates and evaluates on the embedded Bible EN-DE;
# `make test` runs the test suite but its slow end-to-end tests, which `make test-slow` runs (CI runs
# both). Each creates .venv and installs into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DIR ?= runs/demo
DEMO_BUDGET ?= 6m
DEMO_EXPORT ?= $(DEMO_DIR)-export
# Test processes: most of a test's time is single-threaded tracing, so two processes on two cores
# take about half as long as one. A file's tests share a process (its fixtures); files are handed
# out in the order tests/conftest.py sorts them (the heaviest first).
TEST_WORKERS ?= 2
PYTEST_XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo test test-slow lint install install-dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# uv installs what pip would (the same pins; of 160 packages, one backport at another patch
# release), downloading and unpacking in parallel: in a fresh clone's `make test`, the install and
# lint took 17 s from an empty uv cache where pip's took 44 s (bench/RESULTS.md, "The test suite's
# time"). It byte-compiles nothing: Python compiles on first import only the few thousand modules the
# tests import, of ~20,000. uv reads no pip.conf: the find-links that hold PyTorch's CPU build (on
# our machines) go to it from PIP_FIND_LINKS, or else from pip's configuration.
$(BIN)/uv: | $(BIN)/python
	$(BIN)/python -m pip install --quiet uv==0.13.9
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL := $(BIN)/uv pip install --quiet --python $(BIN)/python $(foreach links,$(FIND_LINKS),--find-links $(links))

# The editable install sees code changes; it is redone only when pyproject.toml changes.
$(VENV)/installed: pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) -e .
	touch $@

$(VENV)/installed-dev: pyproject.toml | $(BIN)/uv
	$(UV_INSTALL) -e ".[dev]"
	touch $@ $(VENV)/installed

install: $(VENV)/installed

install-dev: $(VENV)/installed-dev

# A 6-minute budget favours two layers over the `small` preset's three (bench/JOURNAL.md, "Six minutes, varied").
demo: install
	$(BIN)/keras-transformer train --data bible-en-de --preset small --num-layers 2 --model-dir $(DEMO_DIR) --time-budget $(DEMO_BUDGET)
	$(BIN)/keras-transformer translate --model-dir $(DEMO_DIR) \
		"In the beginning God created the heavens and the earth." \
		"Jesus wept." \
		"The Lord is my shepherd; I shall not want."
	$(BIN)/keras-transformer evaluate --model-dir $(DEMO_DIR) --show 3
	$(BIN)/keras-transformer export --model-dir $(DEMO_DIR) --out $(DEMO_EXPORT)
	$(BIN)/keras-transformer export --check $(DEMO_EXPORT)

# `make test`: every test but those marked `slow`, under 10 minutes with the install on 2 cores
# (bench/RESULTS.md, "The test suite's time"). `make test-slow`: the end-to-end ones, which run the README's examples, the
# notebooks, the command line in processes of its own, exports, several workers and bench/.
# KT_TEST_CPU=cpu.jsonl make test: one JSON line per test, its CPU seconds (tests/conftest.py's recorder).
# -rs: every skipped test's reason is printed (a full-disk test on a tmpfs skips where none can be
# mounted, and fails instead under CI=true).
# Both write the bytecode of what they import into .venv (installed without it): where
# PYTHONDONTWRITEBYTECODE is set, as on our machines, every test process and each subprocess a test
# starts compiled TensorFlow's modules again (`import tensorflow, keras, tensorflow_text`: 10.7 user
# CPU-s, 4.4 from bytecode).
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
test: install-dev lint
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -rs $(PYTEST_XDIST) -m "not slow" --durations=10

test-slow: install-dev
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -rs $(PYTEST_XDIST) -m slow --durations=10

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache
