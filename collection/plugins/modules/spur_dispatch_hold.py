#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_dispatch_hold
short_description: Hold new jobs and steps off a Spur node while its spurd restarts in place
version_added: 1.0.0
description:
  - Run it just before restarting a node's C(spurd) in place (a rolling upgrade that keeps running jobs). The
    leader then sends no new job or step to the node until its agent registers again or the hold ends, and
    answers only once every launch already on its way to the node has landed, so none is lost to the restart.
  - The node is not drained, its state and reason do not change, an operator's drain stays as it is, and its
    running jobs go on. Other nodes take the work meanwhile.
  - The hold ends by itself after O(hold_secs), at most the controllers' C([controller] heartbeat_timeout_secs),
    after which a silent agent is judged lost anyway. A stop for good needs no hold, so C(spurd) never holds on
    its own.
  - Needs the cluster at WAL level 4 (every controller on a release that reads it, and the level raised, as the
    last step of the rolling upgrade that brought it). Below that the task fails, or with
    O(on_unsupported=skip) succeeds with RV(held=false) and a warning, and the agent restarts without a hold.
author:
  - Spur contributors (!UNKNOWN)
options:
  name:
    description:
      - The node's name, as the controllers know it.
    type: str
    required: true
  hold_secs:
    description:
      - How long the hold lasts at most, in seconds; V(0) asks for the longest the controllers allow.
      - A hold the node already has with at least half of this left is kept, so a re-run changes nothing.
    type: float
    default: 30
  on_unsupported:
    description:
      - What to do when the cluster's WAL level is below 4.
      - V(fail) fails the task. V(skip) succeeds without a hold (restart such agents one at a time).
    type: str
    choices: [fail, skip]
    default: fail
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode RV(hold_until) is predicted from this host's clock (0 when O(hold_secs=0)).
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
seealso:
  - module: spur.cluster.spur_node
  - module: spur.cluster.spur_node_info
"""

EXAMPLES = r"""
- name: Hold new work off the node, then restart its spurd in place
  spur.cluster.spur_dispatch_hold:
    name: "{{ spur_node_name }}"
    hold_secs: 30
    on_unsupported: skip

- name: Restart spurd
  ansible.builtin.service:
    name: spurd
    state: restarted
"""

RETURN = r"""
name:
  description: The node's name.
  returned: always
  type: str
  sample: node01
held:
  description: Whether the node holds dispatch after this task (false only with O(on_unsupported=skip)).
  returned: success
  type: bool
  sample: true
hold_until:
  description: When the hold ends at the latest (controller clock, seconds since the epoch); 0 without a hold.
  returned: success
  type: float
  sample: 1764600000.5
wal_level:
  description: The cluster's WAL level.
  returned: success
  type: int
  sample: 4
node:
  description: The node after this task, with the keys of M(spur.cluster.spur_node_info)'s nodes.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_dispatch import DispatchHold


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        hold_secs=dict(type="float", default=30),
        on_unsupported=dict(type="str", choices=["fail", "skip"], default="fail"),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = DispatchHold(module.params, check_mode=module.check_mode, diff=module._diff).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
