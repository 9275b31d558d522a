# The two commands of the README: `make demo` and `make test`. Each sets itself up on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: setup test test-unit test-molecule test-upgrade test-sanity lint demo demo-down bench bench-slurm clean protos

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check daemons tests tools bench
	$(BIN)/python tools/gen_protos.py --check
	$(BIN)/python tools/gen_module_docs.py --check

# `make test` runs what fits the CI budget (30 minutes on a 2-core machine): lint, unit, integration, faults,
# docs, the collection (ansible-test sanity included), the tier-2 Molecule deploy scenario (systemd hosts;
# skipped without root), the tier-1 rolling-upgrade scenario and the demo end to end. `make test-molecule` runs the rest of Molecule: the tier-1
# deploy scenario (its deploy also runs inside the rolling-upgrade scenario and the demo) and the tier-2 rolling
# upgrade (about 15 more minutes); `make test-sanity` runs only ansible-test sanity on the whole collection.
SANITY_TEST := tests/collection/test_collection_build.py::test_ansible_test_sanity_passes_with_empty_ignore_files
LOCAL_SCENARIO := tests/molecule/test_scenarios.py::test_local_scenario_deploys_converges_and_runs_a_job
TIER2_UPGRADE := tests/molecule/test_upgrade.py::test_rolling_upgrade_on_systemd_hosts
test: setup lint
	$(BIN)/python -m pytest -q --durations=30 tests \
		--deselect $(LOCAL_SCENARIO) --deselect $(TIER2_UPGRADE)

test-molecule: setup
	$(BIN)/python -m pytest -q $(LOCAL_SCENARIO) $(TIER2_UPGRADE)

test-sanity: setup
	$(BIN)/python -m pytest -q $(SANITY_TEST)

test-upgrade: setup
	$(BIN)/python -m pytest -q tests/molecule/test_upgrade.py tests/demo

test-unit: setup
	$(BIN)/python -m pytest -q tests/unit

demo: setup
	$(BIN)/python tools/demo.py up

demo-down: setup
	$(BIN)/python tools/demo.py down

# Benchmarks record bench/results/<name>.json; not part of `make test` (docs/benchmarks.md).
bench: setup
	@if [ -f bench/run_all.py ]; then $(BIN)/python bench/run_all.py; \
	else $(BIN)/python bench/failover.py && $(BIN)/python bench/agent_restart.py; fi

bench-slurm: setup
	$(BIN)/python bench/slurm_peer.py

protos: setup
	$(BIN)/python tools/gen_protos.py

clean:
	rm -rf $(VENV) .spur-demo .pytest_cache
