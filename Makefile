# mico — the two commands of the quick start, plus lint.
# `make demo` and `make test` create .venv when it is missing; every install goes through
# constraints.txt so that torch stays at the CPU build of 2.13.0.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt

.PHONY: demo test lint venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/mico demo

# --durations: the slowest tests at the end of every run, to keep the suite within budget
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --durations=20

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

clean:
	rm -rf out build *.egg-info .pytest_cache
