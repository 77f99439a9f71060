# budgetlab: every target creates the virtual environment it needs when it is missing.
#
#   make test        lint (ruff check, ruff format --check, mypy), then the suite, in .venv
#   make pytest      the suite only, in .venv
#   make lint        ruff + mypy only
#   make test-min    the suite in .venv-min, every dependency pinned to its declared floor
#                    (less the slow, notebook and browser tests not marked `floors`)
#   make test-wheel  the suite against the wheel installed into a fresh .venv-wheel
#                    (less the slow, notebook and browser tests not marked `wheel`)
#
# PYTEST_ARGS passes options to pytest, e.g. `make pytest PYTEST_ARGS="-x tests/test_specs.py"`.
#
# Tiers: `make test` runs every test. test-min and test-wheel exist for what only they can catch
# (a dependency at its floor; the package as the wheel installs it), so they run every quick test
# but, of the slow, notebook and browser tests, only those marked `floors` (test-min: every
# notebook, the report renderer, JupyterLab, PDFs, Dask, papermill's errors) or `wheel`
# (test-wheel: the wheel's contents, one notebook, a report rendered from the installed wheel).
# A new expensive test runs in make test only unless it is marked for a tier. MIN_MARKERS= or
# WHEEL_MARKERS= (empty) runs the whole suite in that tier.
MIN_MARKERS ?= not (slow or notebook or browser) or floors
WHEEL_MARKERS ?= not (slow or notebook or browser) or wheel
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LAB_STAMP := $(VENV)/.installed-lab
MIN_VENV := .venv-min
MIN_STAMP := $(MIN_VENV)/.installed
WHEEL_VENV := .venv-wheel
PYTEST_ARGS ?=

.PHONY: test pytest lint test-min test-wheel reports reports-all lab bench clean-reports

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,lab]'
	@touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The floors are written once, as the `>=` bounds in pyproject.toml; tools/min_constraints.py
# turns them into `==` pins (runtime + every extra). Wheels only: a floor without a cp311 wheel
# is no floor. The package itself is installed without dependencies and built by the pinned
# hatchling (no build isolation), so the hatchling floor is proved too.
$(MIN_STAMP): pyproject.toml tools/min_constraints.py
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PYTHON) tools/min_constraints.py > $(MIN_VENV)/floors.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --only-binary=:all: -r $(MIN_VENV)/floors.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(MIN_VENV)/bin/python -m pip check
	$(MIN_VENV)/bin/jupyter-lab --version >/dev/null
	@touch $@

test-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pytest -p no:cacheprovider -m "$(MIN_MARKERS)" $(PYTEST_ARGS)

# A fresh venv with the wheel (and its [test] extra) installed, not the checkout: PYTHONSAFEPATH
# keeps the working directory off sys.path (also in subprocesses and notebook kernels), and
# BUDGETLAB_EXPECT_INSTALLED makes tests/test_toolchain.py check where budgetlab came from.
test-wheel:
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip wheel --quiet --no-deps --wheel-dir $(WHEEL_VENV)/dist .
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$$(ls $(WHEEL_VENV)/dist/budgetlab-*.whl)[test]"
	BUDGETLAB_EXPECT_INSTALLED=1 PYTHONSAFEPATH=1 $(WHEEL_VENV)/bin/python -m pytest -p no:cacheprovider -m "$(WHEEL_MARKERS)" $(PYTEST_ARGS)

# The default reports: every notebook in the seeds' scenario: about four minutes on two free
# cores (256 s measured for 13 reports), longer when they are shared; progress is printed as reports
# start and finish, and every 30 s which are still running.
DEFAULT_SCENARIO := h100-llama-3.1-8b
reports: $(STAMP)
	$(BIN)/python -m budgetlab.reports --scenario $(DEFAULT_SCENARIO) $(ARGS)

# Every notebook x every scenario in notebooks/params/ (four scenarios: about four times as
# long as `make reports`).
reports-all: $(STAMP)
	$(BIN)/python -m budgetlab.reports $(ARGS)

# JupyterLab on this machine only (127.0.0.1), as root too, asking nothing of the internet
# (budgetlab/notebook/lab.py); first the git filter that strips
# outputs from every notebook git stores (.gitattributes names it, this configures it locally).
lab: $(LAB_STAMP)
	@if git rev-parse --git-dir >/dev/null 2>&1; then $(BIN)/nbstripout --install --attributes .gitattributes; fi
	$(BIN)/python -m budgetlab.notebook.lab notebooks $(ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean-reports:
	rm -rf reports/
