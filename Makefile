# The two commands of the README: `make demo` and `make test`. Each sets itself up on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

.PHONY: setup bytecode test test-lane-hosts test-lane-processes test-unit test-molecule test-upgrade test-sanity test-clients lint demo demo-down bench bench-slurm clean protos

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@rm -f $(VENV)/.installed-*; touch $@

setup: $(STAMP)

# Bytecode of the checkout's own modules, written before the tests start them. Where PYTHONDONTWRITEBYTECODE is
# set (the shells of this project's machines set it) Python never writes it, and each process a test started
# compiled every module it imported from source again: 0.45 s of each spurctld's start, about 30 ms of each
# command. compileall writes it anyway, and only for the files changed since.
bytecode: setup
	@$(BIN)/python -m compileall -q -j 0 daemons tests tools bench

lint: setup
	$(BIN)/ruff check daemons tests tools bench
	$(BIN)/python tools/gen_protos.py --check
	$(BIN)/python tools/gen_module_docs.py --check
	$(BIN)/python tools/gen_module_utils.py --check

# `make test` runs everything (lint, unit, integration, faults, docs, the collection with ansible-test sanity, every
# Molecule scenario of both tiers, the demo end to end) in two lanes at once: most tests wait on real daemons,
# so a second lane uses the second core instead of doubling the wall time. The host lane holds the tests that
# boot their own hosts (the tier-2 upgrade scenario on systemd-nspawn hosts in network namespaces, which also runs
# the systemd scenario's checks; the tier-1 upgrade scenario, which also runs the local scenario's checks, and the demo, each on a loopback block of its own; then the client libraries and ansible-test sanity); the process lane the rest, which takes about as long. Each lane's
# output is printed whole when it ends; tier 2 is skipped without root (under CI=true it fails: tests/prereqs.py).
# `make test-molecule`, `make test-upgrade` and `make test-sanity` run parts on their own.
SANITY_TEST := tests/collection/test_collection_build.py::test_ansible_test_sanity_passes_with_empty_ignore_files
TIER2_UPGRADE := tests/molecule/test_upgrade.py::test_rolling_upgrade_on_systemd_hosts
# The tier-1 rolling upgrade in every mode (about 6 minutes) runs in the host lane too: the process lane was the
# longer one by that much (1,605 s against 861 s), and it boots a loopback cluster of its own.
TIER1_UPGRADE := tests/molecule/test_upgrade.py::test_rolling_upgrade_in_every_mode
# tests/clients: submitit, dask-jobqueue and snakemake from PyPI (pinned in tests/clients/constraints.txt, in a
# .venv-clients of their own) against a loopback cluster with accounting.
# ansible-test sanity (about 2 minutes) ends the host lane: after the upgrade got faster (2026-12-03) the process
# lane was the longer one by 3 minutes (1,760 s against 1,582 s).
HOST_LANE := $(TIER2_UPGRADE) $(TIER1_UPGRADE) tests/demo tests/clients $(SANITY_TEST)
# Lint runs first in the process lane, not before both: the host lane starts at once (the two take about as long).
test: setup
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-lane-hosts test-lane-processes

test-lane-hosts: setup bytecode
	@echo "== host lane: $(HOST_LANE)"
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 $(HOST_LANE)

test-lane-processes: setup lint bytecode
	@echo "== process lane: tests/ but the host lane"
	$(BIN)/python -m pytest -q --durations=30 tests --ignore=tests/demo --ignore=tests/clients \
		--deselect $(TIER2_UPGRADE) --deselect $(TIER1_UPGRADE) --deselect $(SANITY_TEST)

test-molecule: setup bytecode
	$(BIN)/python -m pytest -q tests/molecule/test_upgrade.py

test-sanity: setup bytecode
	$(BIN)/python -m pytest -q $(SANITY_TEST)

test-upgrade: setup bytecode
	$(BIN)/python -m pytest -q tests/molecule/test_upgrade.py tests/demo

test-clients: setup bytecode
	$(BIN)/python -m pytest -q tests/clients

test-unit: setup bytecode
	$(BIN)/python -m pytest -q tests/unit

demo: setup bytecode
	$(BIN)/python tools/demo.py up

demo-down: setup
	$(BIN)/python tools/demo.py down

# Benchmarks record bench/results/<name>.json; not part of `make test` (docs/benchmarks.md).
bench: setup bytecode
	@if [ -f bench/run_all.py ]; then $(BIN)/python bench/run_all.py; \
	else $(BIN)/python bench/failover.py && $(BIN)/python bench/agent_restart.py; fi

bench-slurm: setup bytecode
	$(BIN)/python bench/slurm_peer.py

protos: setup
	$(BIN)/python tools/gen_protos.py

clean:
	rm -rf $(VENV) .venv-clients .spur-demo .pytest_cache
