# budgetlab: every target creates the virtual environment in .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAB_STAMP := $(VENV)/.installed-lab

.PHONY: test reports reports-all lab bench clean-reports

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,lab]'
	@touch $@

test: $(STAMP)
	$(BIN)/python -m pytest

# The default reports: every notebook in the seeds' scenario (about half a minute).
DEFAULT_SCENARIO := h100-llama-3.1-8b
reports: $(STAMP)
	$(BIN)/python -m budgetlab.reports --scenario $(DEFAULT_SCENARIO) $(ARGS)

# Every notebook x every scenario in notebooks/params/ (about a minute and a half).
reports-all: $(STAMP)
	$(BIN)/python -m budgetlab.reports $(ARGS)

lab: $(LAB_STAMP)
	$(BIN)/jupyter lab notebooks/

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean-reports:
	rm -rf reports/
