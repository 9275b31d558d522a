#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_cluster_health
short_description: Wait until a Spur cluster is healthy, or fail naming what is not
version_added: 1.0.0
description:
  - Probes every controller until all of these hold at once, then returns.
  - Every controller in O(controllers) answers, and none has stopped applying the log.
  - Exactly one controller answers as leader, and it has kept the same term for O(stable_for) seconds.
  - Every committed member is at most O(max_lag) entries behind the leader's commit index.
  - Every controller named in O(running) answers ready on the version and build given for it (a rolling
    upgrade's gate after a controller's restart).
  - Every node in O(expected_nodes) is registered (this one calls the gRPC API).
  - Fails after O(wait_timeout) seconds with a message naming each condition that is still unmet.
  - Never changes anything.
author:
  - Spur contributors (!UNKNOWN)
options:
  stable_for:
    description:
      - Seconds the same leader must hold the same term before the cluster counts as healthy.
    type: float
    default: 3
  max_lag:
    description:
      - The most entries a member's applied index may be behind the leader's commit index.
    type: int
    default: 100
  held_term:
    description:
      - A term the leader held before this wait began (the term seen before a follower restarted). A leader still
        on that term has held it since then, so O(stable_for) is met at once; any other term waits O(stable_for).
    type: int
  running:
    description:
      - Controllers (by name) that must run a given release, each as a dict with C(version) and C(build).
    type: dict
    default: {}
  expected_nodes:
    description:
      - Nodes whose agents must be registered.
    type: list
    elements: str
    default: []
  wait_timeout:
    description:
      - Seconds to keep probing before failing. V(0) probes once.
    type: float
    default: 60
  poll_interval:
    description:
      - Seconds between probes.
    type: float
    default: 0.5
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
    details: Nothing is ever changed.
seealso:
  - module: spur.cluster.spur_controller_info
"""

EXAMPLES = r"""
- name: Wait for a stable leader after restarting a controller
  spur.cluster.spur_cluster_health:
    controllers: "{{ spur_controller_probes }}"
    controller_names: "{{ groups['spur_controllers'] }}"
    stable_for: 5
    max_lag: 50
    wait_timeout: 120

- name: Wait for the agents to be back too
  spur.cluster.spur_cluster_health:
    controllers: "{{ spur_controller_probes }}"
    expected_nodes: "{{ groups['spur_agents'] | map('extract', hostvars, 'spur_node_name') | list }}"
"""

RETURN = r"""
healthy:
  description: True once every condition held (a failed task has it false).
  returned: always
  type: bool
  sample: true
unmet:
  description: The conditions that did not hold at the last probe, one line each.
  returned: always
  type: list
  elements: str
  sample: ["member 127.0.1.3:6821 lags 420 entries behind the leader (max_lag 100)"]
waited:
  description: Seconds spent probing.
  returned: always
  type: float
  sample: 3.52
leader:
  description: The leader's name (null without a single leader).
  returned: always
  type: str
  sample: ctl-1
one_leader:
  description: True when exactly one controller answered as leader.
  returned: always
  type: bool
term:
  description: The leader's term.
  returned: always
  type: int
controllers:
  description: The last probe of every controller, as M(spur.cluster.spur_controller_info) returns them.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_info import ClusterHealth


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        stable_for=dict(type="float", default=3),
        max_lag=dict(type="int", default=100),
        held_term=dict(type="int"),
        running=dict(type="dict", default={}),
        expected_nodes=dict(type="list", elements="str", default=[]),
        wait_timeout=dict(type="float", default=60),
        poll_interval=dict(type="float", default=0.5),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = ClusterHealth(module.params).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
