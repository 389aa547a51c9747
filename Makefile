# STAGE: the two commands that matter are `make run` and `make test`.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOSO_JOBS ?= 1

.PHONY: install run test lint validate bench golden clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (STAGE needs Python >= 3.11; set PYTHON=...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: install
	@# A second run continues (and, for the finished grid, just reports) the recorded study.
	$(BIN)/stage explore quickstart --out results $$(test -e results/quickstart/_study.json && echo --resume)
	$(BIN)/stage report results/quickstart --html results/quickstart/report.html

test: install
	@# pytest exits 5 when it collected no test (e.g. PYTEST_ARGS="-k …" matching nothing): not a failure.
	$(BIN)/python -m pytest $(PYTEST_ARGS) || { status=$$?; [ $$status -eq 5 ] && echo "no tests collected (pytest exit 5)"; [ $$status -eq 5 ]; }

lint: install
	$(BIN)/ruff check stage_core stage_explore tests benchmarks
	$(BIN)/mypy

validate: install
	@# The slow tests, then every published run against the targets of issue #11 (exit 1 and
	@# the list of missed targets when one is missed; both halves always run). LOSO_JOBS=N fits
	@# N sources of the leave-one-source-out figure at once (the same figure; default 1).
	@status=0; \
	$(BIN)/python -m pytest -m slow -q || status=1; \
	$(BIN)/stage validate --loso --jobs $(LOSO_JOBS) --check || status=1; \
	exit $$status

bench: install
	$(BIN)/python benchmarks/run_all.py

golden: install
	$(BIN)/python -m tests.regenerate_golden

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
