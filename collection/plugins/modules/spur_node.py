#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_node
short_description: Drain, resume or set DOWN one Spur node, without touching an operator's drain
version_added: 1.0.0
description:
  - Reads the node from the controllers first and changes it only when it is not already in the state asked.
  - Drains this module sets carry a reason that starts with O(reason_prefix). With O(state=resumed) only such
    drains are cleared; a drain or DOWN set by anyone else is left alone (with a warning) unless O(force=true).
  - RV(drained_before) tells whether the node was drained before this task, so a play can resume only the
    nodes it drained itself.
  - With O(wait=true), O(state=drained) waits until no job runs on the node (a drain never kills jobs), and
    O(state=resumed) waits until the node's agent is registered and the node takes work.
  - When a drain wait runs out, a drain this task set is undone before the task fails (see O(on_timeout)).
  - While no controller answers (a network drop on the host the module runs on), every read and every change
    is tried again for up to 30 seconds before the task fails; a drain, resume or down is safe to repeat.
author:
  - Spur contributors (!UNKNOWN)
options:
  name:
    description:
      - The node's name, as the controllers know it.
    type: str
    required: true
  state:
    description:
      - V(drained) sets the drain flag, so no new job starts on the node; running jobs go on.
      - V(resumed) clears a drain or DOWN this collection set (any, with O(force=true)).
      - V(down) sets the node DOWN, which ends its running jobs as NODE_FAIL; a busy node needs O(force=true).
    type: str
    choices: [drained, resumed, down]
    default: drained
  reason:
    description:
      - Why, recorded after O(reason_prefix) on a drain or DOWN this task sets.
    type: str
    default: maintenance
  reason_prefix:
    description:
      - The prefix that marks a drain or DOWN as set by this collection.
      - Use the same prefix for the drain and the resume.
    type: str
    default: "spur-ansible: "
  wait:
    description:
      - For V(drained), wait until no job runs on the node. For V(resumed), wait until the node is registered and
        in service. Ignored for V(down) and in check mode.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds to wait when O(wait=true).
    type: float
    default: 600
  on_timeout:
    description:
      - What to do when a drain wait runs out while jobs still run.
      - V(fail) undoes a drain this task set and fails.
      - V(revert) undoes a drain this task set and succeeds with RV(outcome=busy) (leave a busy node as it was).
      - V(keep) keeps the node draining and succeeds with RV(outcome=busy).
    type: str
    choices: [fail, revert, keep]
    default: fail
  force:
    description:
      - With V(resumed), also clear a drain or DOWN this collection did not set.
      - With V(down), set a node that runs jobs DOWN, ending those jobs.
    type: bool
    default: false
  allow_missing:
    description:
      - Succeed with RV(outcome=gone) when the controllers do not know the node, instead of failing.
    type: bool
    default: false
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode nothing is waited for.
      - The controller alone sees the reason of a drain hidden under a DOWN; for such a node check mode predicts
        that a resume would clear it.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
seealso:
  - module: spur.cluster.spur_node_info
  - module: spur.cluster.spur_upgrade_plan
"""

EXAMPLES = r"""
- name: Drain the node and wait for its jobs to finish
  spur.cluster.spur_node:
    name: "{{ spur_node_name }}"
    state: drained
    reason: rolling upgrade
    wait: true
    wait_timeout: 1800
  register: __spur_drain

- name: Resume it once the new agent is registered (only if this play drained it)
  spur.cluster.spur_node:
    name: "{{ spur_node_name }}"
    state: resumed
    wait: true
    wait_timeout: 120
  when: not __spur_drain.drained_before

- name: Skip a busy node instead of failing
  spur.cluster.spur_node:
    name: "{{ spur_node_name }}"
    state: drained
    wait: true
    wait_timeout: 300
    on_timeout: revert
  register: __spur_drain_or_skip

- name: Take a broken node out of service, ending its jobs
  spur.cluster.spur_node:
    name: node07
    state: down
    reason: memory errors
    force: true
"""

RETURN = r"""
name:
  description: The node's name.
  returned: always
  type: str
  sample: node01
outcome:
  description:
    - C(drained) (drain flag set, no job runs), C(busy) (drain flag set, jobs still run), C(gone) (the agent is
      not registered, or the node does not exist with O(allow_missing)), C(down) (set DOWN) or C(in_service).
  returned: always
  type: str
  sample: drained
drained_before:
  description: Whether the node was drained (by anyone) before this task.
  returned: always
  type: bool
  sample: false
reverted:
  description: Whether this task undid its own drain after a wait ran out.
  returned: always
  type: bool
  sample: false
before:
  description: The node before this task (state, reason, drain, registered, job_ids).
  returned: success
  type: dict
  sample: {state: IDLE, reason: "", drain: false, registered: true, job_ids: []}
node:
  description:
    - The node after this task, with the keys of M(spur.cluster.spur_node_info)'s nodes (as before the task in
      check mode).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import (
    DEFAULT_REASON_PREFIX,
    SpurError,
    connection_argument_spec,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_nodes import NodeStateChange


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        state=dict(type="str", choices=["drained", "resumed", "down"], default="drained"),
        reason=dict(type="str", default="maintenance"),
        reason_prefix=dict(type="str", default=DEFAULT_REASON_PREFIX),
        wait=dict(type="bool", default=False),
        wait_timeout=dict(type="float", default=600),
        on_timeout=dict(type="str", choices=["fail", "revert", "keep"], default="fail"),
        force=dict(type="bool", default=False),
        allow_missing=dict(type="bool", default=False),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = NodeStateChange(module.params, check_mode=module.check_mode, diff=module._diff).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
