#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_wal_level
short_description: Raise a Spur cluster's WAL level once every controller reads it
version_added: 1.0.0
description:
  - A new release may add replicated-log operations at a new WAL level. The cluster keeps writing the old level
    until this module raises it, which a rolling upgrade does as its last step, after the last controller.
  - Reads the leader's C(/status), checks that every committed member has announced a release that reads the
    level (its C(max_level)), and only then asks the leader to raise it.
  - Refuses, naming the members that are behind, when any member cannot read the level yet.
  - The level never goes down; asking for a level at or below the current one changes nothing.
author:
  - Spur contributors (!UNKNOWN)
options:
  level:
    description:
      - The WAL level to enable. Defaults to the highest level every member reads.
    type: int
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
seealso:
  - module: spur.cluster.spur_preflight
  - module: spur.cluster.spur_controller_info
"""

EXAMPLES = r"""
- name: Enable the newest WAL level every controller reads (last step of a rolling upgrade)
  spur.cluster.spur_wal_level:
    controllers: "{{ groups['spur_controllers'] | map('extract', hostvars, 'spur_probe_addr') | list }}"
  run_once: true

- name: Enable level 2 exactly
  spur.cluster.spur_wal_level:
    level: 2
"""

RETURN = r"""
level:
  description: The cluster's WAL level afterwards (as predicted in check mode).
  returned: success
  type: int
  sample: 2
previous_level:
  description: The level before this task.
  returned: always
  type: int
  sample: 1
target_level:
  description: The level asked for, or the highest every member reads when O(level) is omitted.
  returned: success
  type: int
  sample: 2
requested_level:
  description: O(level) as given (null when omitted).
  returned: always
  type: int
members:
  description: Each committed member's Raft address with the highest level its release reads (null if unknown).
  returned: always
  type: dict
  sample: {"127.0.1.1:6821": 2, "127.0.1.2:6821": 2, "127.0.1.3:6821": 2}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_upgrade import WalLevelRaise


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(level=dict(type="int"))
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = WalLevelRaise(module.params, check_mode=module.check_mode, diff=module._diff).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
