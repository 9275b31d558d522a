# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Loads spur.cluster.spur_upgrade_log for the playbooks of this directory, with no configuration.

Ansible loads a callback found next to the playbook that does not need enabling; the collection's own copy needs
enabling (callbacks_enabled), as every collection callback does. It does nothing outside rolling_upgrade.yml.
"""

from __future__ import annotations

from ansible_collections.spur.cluster.plugins.callback.spur_upgrade_log import CallbackModule as _SpurUpgradeLog

DOCUMENTATION = r"""
name: spur_upgrade_log
type: aggregate
short_description: spur.cluster.spur_upgrade_log, loaded without configuration for the collection's playbooks
description:
  - See spur.cluster.spur_upgrade_log.
author:
  - Spur contributors (!UNKNOWN)
"""


class CallbackModule(_SpurUpgradeLog):
    CALLBACK_NAME = "spur_upgrade_log"
    CALLBACK_NEEDS_ENABLED = False
