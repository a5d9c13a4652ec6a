# Two commands on a fresh machine: `make demo` and `make test` (each sets up what it needs).
PY ?= python3.11
VENV := .venv
FARM := $(VENV)/bin/farm

.PHONY: setup toolchain demo test test-fast clean-demo families

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed toolchain

# The toolchain venv lives under $FARM_CACHE (default ~/.cache/farm), keyed by toolchain/requirements.txt.
toolchain: $(VENV)/.installed
	$(FARM) toolchain install

# Build the tiny Qwen3.5 through every stage on the embedded defaults (FARM_HOME, default ~/.farm),
# ask where the bundle came from, write its model card (card.json, CARD.md, chart.png) and the model
# repository a user uploads (`farm publish`). The
# first command starts the farm's Prefect server in the background (UI on 127.0.0.1:4277).
CARD_DIR ?= $${FARM_HOME:-$$HOME/.farm}/cards/tiny-qwen35
REPO_DIR ?= $${FARM_HOME:-$$HOME/.farm}/published/tiny-qwen35
demo: setup
	$(FARM) build examples/tiny-qwen35.yaml
	$(FARM) lineage $$($(FARM) artifacts --kind litertlm --model tiny-qwen35 --limit 1 --json | \
		$(VENV)/bin/python -c "import json,sys;print(json.load(sys.stdin)['artifacts'][0]['sha256'])")
	$(FARM) card tiny-qwen35 --out "$(CARD_DIR)"
	@echo "model card: $(CARD_DIR)/CARD.md"
	$(FARM) publish tiny-qwen35 --to "$(REPO_DIR)"
	@echo "the repository to upload (README.md, the file, manifest, REPRODUCE.md): $(REPO_DIR)"
	@$(FARM) server status | sed 's/^running: /Prefect UI (runs, artifacts, the card-tiny-qwen35 history): /'
	@echo "(it keeps running for the UI: \`$(FARM) server stop\` stops it)"

# The suite on every core: test files are spread over TEST_WORKERS pytest-xdist workers, a file
# stays on one worker (its module fixtures are built once), the heaviest files start first
# (tests/conftest.py). TEST_WORKERS=0 runs it in one process; PYTEST_ARGS adds options
# (.ci/run: --durations=25). Times: tests/README.md.
TEST_WORKERS ?= 2
test: setup
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Everything but the real-toolchain tests (no torch, no toolchain process): unit tests per module,
# the faults and the integration tests that need only the orchestrator's services. It needs only the
# orchestrator's env (no toolchain env is installed for it).
test-fast: $(VENV)/.installed
	$(VENV)/bin/python -m pytest -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS)

# The family matrix (README "Families, measured"): every family's tiny model built at float and int8
# through every stage, gate and device, then the README's table rewritten from lineage (~20 min).
families: setup
	$(FARM) families --build --write README.md
