# The documented way to do everything; the README quotes these targets.
PYTHON ?= python3
DEMO_HOME ?= $(CURDIR)/.demo-home
VENV ?= .venv
# three pytest workers (one test file each at a time): on 2 cores a third fills the time the others spend
# waiting on the processes their tests start (7.3 → 6.1 min, docs/BENCHMARKS.md); PYTEST_WORKERS= runs one.
# --no-loadscope-reorder: the files go out longest first (tests/conftest.py), not by their count of tests
PYTEST_WORKERS ?= -n 3 --dist loadfile --no-loadscope-reorder

.PHONY: demo test venv test-core bench golden lint inspect clean

demo:            ## index the sample notes in golden/notes and search them (no install, no extras)
	RECALL_HOME=$(DEMO_HOME) $(PYTHON) recall.py --config golden/recall.yaml index
	RECALL_HOME=$(DEMO_HOME) $(PYTHON) recall.py --config golden/recall.yaml search INC-10963
	RECALL_HOME=$(DEMO_HOME) $(PYTHON) recall.py --config golden/recall.yaml search "disk filled up on the build server"

test: venv       ## ruff, then the whole suite, in .venv/ (made first when missing or when pyproject.toml changed)
	@echo "make test: ruff over the tree (ruff.toml), then the suite in $(VENV) (a few minutes)"
	$(VENV)/bin/python -m ruff check --quiet .
	@# bytecode, as `pip install` writes it: under PYTHONDONTWRITEBYTECODE (CI sets it) each of the ~1,300
	@# recalls the tests start would compile its modules anew, ~80 ms apiece (docs/BENCHMARKS.md)
	$(VENV)/bin/python -m compileall -q recall
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" RECALL_TEST_HEARTBEAT_FD=3 $(VENV)/bin/python -m pytest -q $(PYTEST_WORKERS) 3>&1

venv:            ## .venv/ with every extra the tests use, plus missing system tools (sshd, openssl); reused while pyproject.toml is unchanged
	@VENV=$(VENV) PYTHON=$(PYTHON) bash .ci/install

test-core:       ## core tests in bare venvs (no extras) for every Python 3.9–3.13 found
	$(PYTHON) tests/run_core.py

bench: venv      ## benchmarks in .venv/ (the hybrid and embedding ones need its extras); results written to docs/BENCHMARKS.md
	$(VENV)/bin/python bench/run.py

golden:          ## score search on the golden queries (keyword; local model and Voyage side by side when available)
	RECALL_HOME=$(DEMO_HOME) $(PYTHON) recall.py --config golden/recall.yaml index
	RECALL_HOME=$(DEMO_HOME) $(PYTHON) recall.py --config golden/recall.yaml eval golden/queries.jsonl
	$(PYTHON) bench/golden_providers.py --home $(DEMO_HOME)/providers

lint: venv       ## ruff over the tree (pyflakes, import order, a few bugbear checks: ruff.toml), from .venv/
	$(PYTHON) -m compileall -q recall tests
	$(VENV)/bin/python -m ruff check .

clean:
	rm -rf $(DEMO_HOME) .venv-core .pytest_cache

INSPECT_ARGS ?= --method tools/list
inspect:         ## the MCP Inspector's CLI against `recall mcp` (needs Node's npx; optional, not in CI)
	@command -v npx >/dev/null 2>&1 || { echo "make inspect: skipped, it needs Node.js (npx)"; exit 0; }
	npx -y @modelcontextprotocol/inspector --cli $(PYTHON) $(CURDIR)/recall.py mcp $(INSPECT_ARGS)
