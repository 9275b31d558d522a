"""Fixtures for the spur.cluster tests (helpers live in collection_helpers, which also sets the import path)."""

from __future__ import annotations

import pytest
from collection_helpers import run_playbook  # first: it puts ansible_collections.spur.cluster on the import path

from collection_fakes import FakeCluster, FakeController  # isort: skip
from ansible_collections.spur.cluster.plugins.module_utils import spur_client  # isort: skip


@pytest.fixture
def playbook(tmp_path):
    """playbook(tasks, timeout=300, module_defaults=None) runs tasks on localhost with ansible-playbook;
    -> the registered results."""
    return lambda tasks, timeout=300, module_defaults=None: run_playbook(tmp_path, tasks, timeout, module_defaults)


@pytest.fixture
def fake_cluster():
    cluster = FakeCluster(leader=1)
    yield cluster
    cluster.close()


@pytest.fixture
def controller(monkeypatch):
    fake = FakeController()
    monkeypatch.setattr(spur_client.SpurConnection, "rpc", lambda self: fake)
    return fake
