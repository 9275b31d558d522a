"""Fixtures for the spur.cluster tests (helpers live in collection_helpers, which also sets the import path)."""

from __future__ import annotations

import pytest
from collection_helpers import run_playbook


@pytest.fixture
def playbook(tmp_path):
    """playbook(tasks, timeout=300, module_defaults=None) runs tasks on localhost with ansible-playbook;
    -> the registered results."""
    return lambda tasks, timeout=300, module_defaults=None: run_playbook(tmp_path, tasks, timeout, module_defaults)
