#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_upgrade_plan
short_description: Plan a rolling upgrade of a Spur cluster
version_added: 1.0.0
description:
  - Probes the controllers and agents and returns the order of a rolling upgrade to O(target_build); changes
    nothing.
  - Controllers go one at a time, followers first and the leader last, so the leader never runs a newer release
    than the followers it replicates to. An explicit O(order) replaces that and must name every controller
    exactly once.
  - When no controller or more than one answers as leader, the plan warns and falls back to the order of
    O(controllers).
  - Agents go in batches of O(batch_size), after an optional canary batch of one.
  - Hosts that already run O(target_build) (and O(target_version), when given) are left out; busy and
    unreachable agents are listed so the play can apply its policy to them.
author:
  - Spur contributors (!UNKNOWN)
options:
  target_build:
    description:
      - The build (content hash) being rolled out, as RV(spur.cluster.spur_release#module:build) returns it.
    type: str
    required: true
  target_version:
    description:
      - The version being rolled out, as RV(spur.cluster.spur_release#module:version) returns it.
      - When given, a host counts as at the target only when it runs this version as well as O(target_build).
        The build is a hash of the source, so one tree released under two versions has a single build; only the
        version tells those two releases apart.
    type: str
  order:
    description:
      - The controllers' upgrade order by name (see O(controller_names)), instead of leader-last.
      - Must name every controller exactly once.
    type: list
    elements: str
  agents:
    description:
      - The agent hosts, in inventory order.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - The host's name in the plan (usually its inventory hostname).
        type: str
        required: true
      node:
        description:
          - The node name the controllers know it by. Defaults to what the agent's probe says, else O(agents[].name).
        type: str
      probe:
        description:
          - The agent's probe endpoint (C(host:port), port 6823 when omitted). Without it the agent is planned from
            the controllers' node list.
        type: str
  batch_size:
    description:
      - Agents per batch.
    type: int
    default: 1
  canary:
    description:
      - Upgrade one agent alone first, so a bad build stops after a single node.
    type: bool
    default: false
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
  - module: spur.cluster.spur_preflight
  - module: spur.cluster.spur_node
"""

EXAMPLES = r"""
- name: Describe the agents for the plan
  ansible.builtin.set_fact:
    __spur_agents: "{{ __spur_agents | default([]) + [{'name': item, 'probe': hostvars[item].spur_agent_probe_addr}] }}"
  loop: "{{ groups['spur_agents'] }}"

- name: Plan the upgrade
  spur.cluster.spur_upgrade_plan:
    controllers: "{{ groups['spur_controllers'] | map('extract', hostvars, 'spur_probe_addr') | list }}"
    controller_names: "{{ groups['spur_controllers'] }}"
    target_build: "{{ __spur_release.build }}"
    target_version: "{{ __spur_release.version }}"
    agents: "{{ __spur_agents }}"
    batch_size: 2
    canary: true
  register: __spur_plan

- name: Plan with an explicit controller order
  spur.cluster.spur_upgrade_plan:
    controllers: [127.0.1.1:6822, 127.0.1.2:6822, 127.0.1.3:6822]
    controller_names: [ctl-0, ctl-1, ctl-2]
    order: [ctl-2, ctl-0, ctl-1]
    target_build: 3f2a9c81d0e4
    agents:
      - name: node01
        probe: 127.0.1.11:6823
      - name: node02
        probe: 127.0.1.12:6823
  register: __spur_plan

- name: Put the controllers into an in-memory group, in upgrade order
  ansible.builtin.add_host:
    name: "{{ item }}"
    groups: spur_controllers_ordered
  loop: "{{ __spur_plan.controllers.upgrade }}"
"""

RETURN = r"""
target_build:
  description: The build planned for.
  returned: always
  type: str
target_version:
  description: The version planned for (null when O(target_version) was not given).
  returned: success
  type: str
controllers:
  description: The controllers' part of the plan.
  returned: success
  type: dict
  contains:
    order:
      description: Every controller, in upgrade order.
      type: list
      elements: str
      sample: [ctl-0, ctl-2, ctl-1]
    order_source:
      description: V(leader_last), V(explicit), V(single) (one controller) or V(inventory) (the fallback).
      type: str
      sample: leader_last
    leader:
      description: The controller that answered as leader, null unless exactly one did.
      type: str
      sample: ctl-1
    upgrade:
      description: The controllers to upgrade, in order (RV(controllers.order) less those at the target release).
      type: list
      elements: str
    at_target:
      description: Controllers that already run the target release (build, and version when given).
      type: list
      elements: str
    unreachable:
      description: Controllers that did not answer (they stay in RV(controllers.upgrade)).
      type: list
      elements: str
agents:
  description: The agents' part of the plan.
  returned: success
  type: dict
  contains:
    batches:
      description: Lists of agent names, one list per batch, in order.
      type: list
      elements: list
      sample: [[node01], [node02, node03]]
    upgrade:
      description: Every agent to upgrade, in order.
      type: list
      elements: str
    at_target:
      description: Agents that already run the target release (build, and version when given).
      type: list
      elements: str
    busy:
      description: Agents to upgrade that run jobs now.
      type: list
      elements: str
    unreachable:
      description: Agents whose probe did not answer (or, without a probe, whose node is not registered).
      type: list
      elements: str
    unknown:
      description: Agents the controllers do not list.
      type: list
      elements: str
agent_observations:
  description: What was seen of each agent (name, node, build, version, busy, reachable, known, state, error).
  returned: success
  type: list
  elements: dict
cluster:
  description: The controller probes, as M(spur.cluster.spur_controller_info) returns them.
  returned: success
  type: dict
up_to_date:
  description: True when no controller and no agent needs the upgrade.
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_upgrade import UpgradePlan


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        target_build=dict(type="str", required=True),
        target_version=dict(type="str"),
        order=dict(type="list", elements="str"),
        agents=dict(
            type="list",
            elements="dict",
            default=[],
            options=dict(
                name=dict(type="str", required=True),
                node=dict(type="str"),
                probe=dict(type="str"),
            ),
        ),
        batch_size=dict(type="int", default=1),
        canary=dict(type="bool", default=False),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = UpgradePlan(module.params).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    for warning in result.pop("warnings", []):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
