#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_node_info
short_description: List Spur nodes with their state, drain reason and running jobs
version_added: 1.0.0
description:
  - Asks the controllers (gRPC C(ListNodes), the leader first) for every node, or the nodes named, with state
    (IDLE, MIXED, ALLOCATED, DRAINING, DRAINED, DOWN), reason, registration, version and build.
  - When agent probe addresses are given, each agent's own C(/status) adds its running jobs with their attempt
    and supervisor pid; otherwise running jobs come from the controllers' job ids only.
  - Never changes anything.
author:
  - Spur contributors (!UNKNOWN)
options:
  names:
    description:
      - Only these nodes. Names the controllers do not know are returned in RV(missing).
      - All nodes when omitted.
    type: list
    elements: str
  agent_probes:
    description:
      - The agents' HTTP probe endpoints (C(probe_addr) of C(spurd)) as C(http://host:port), C(host:port) or
        C(host) (port 6823 when omitted). Each agent's C(/status) names its node, so the order does not matter.
    type: list
    elements: str
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
  - module: spur.cluster.spur_node
"""

EXAMPLES = r"""
- name: Every node, with the agents' view of their jobs
  spur.cluster.spur_node_info:
    controllers: "{{ spur_controller_probes }}"
    agent_probes: "{{ groups['spur_agents'] | map('extract', hostvars, 'spur_agent_probe_addr') | list }}"
  register: __spur_nodes

- name: Fail when a node still runs a job
  ansible.builtin.assert:
    that: __spur_nodes.nodes | map(attribute='running_jobs') | flatten | length == 0
    fail_msg: "jobs still run on {{ __spur_nodes.nodes | selectattr('job_ids') | map(attribute='name') | list }}"

- name: One node
  spur.cluster.spur_node_info:
    names: [node01]
  register: __spur_node01
"""

RETURN = r"""
nodes:
  description: The nodes, sorted by name.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Node name.
      type: str
      sample: node01
    state:
      description: IDLE, MIXED, ALLOCATED, DRAINING, DRAINED or DOWN.
      type: str
      sample: DRAINED
    reason:
      description: Why the node is out of service (drain, DOWN or lost-agent reason), empty when it is in service.
      type: str
      sample: "spur-ansible: rolling upgrade"
    reason_set_by:
      description: Who set the reason.
      type: str
    drain:
      description: Whether the administrative drain flag is set (DRAINING or DRAINED underneath any DOWN).
      type: bool
    registered:
      description: Whether the node's agent is registered with the controllers.
      type: bool
    version:
      description: Release version the agent registered with.
      type: str
    build:
      description: Build the agent registered with.
      type: str
    job_ids:
      description: Ids of the jobs the controllers run on the node.
      type: list
      elements: int
    running_jobs:
      description: Running jobs, each with C(job_id), C(attempt) and C(supervisor_pid) (the last two null when they
        come from the controllers).
      type: list
      elements: dict
      sample: [{job_id: 12, attempt: 1, supervisor_pid: 4321}]
    running_jobs_source:
      description: C(agent) when RV(nodes[].running_jobs) comes from the agent's probe, else C(controller).
      type: str
    agent:
      description: The agent's C(/status) (url, reachable, node, registered, controller, running_jobs, version,
        build), null when no probe address was given for it.
      type: dict
    address:
      description: The agent's gRPC address.
      type: str
    partition:
      description: The node's partition.
      type: str
    cpus:
      description: CPUs the agent offers.
      type: int
    memory_mb:
      description: Memory the agent offers, in MB.
      type: int
missing:
  description: Names from O(names) the controllers do not know.
  returned: success
  type: list
  elements: str
agents_unreachable:
  description: Agent probes that did not answer, each with C(url) and C(error).
  returned: success
  type: list
  elements: dict
agents_unknown:
  description: Nodes whose agent answered but that the controllers do not list.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_info import NodeInfo


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        names=dict(type="list", elements="str"),
        agent_probes=dict(type="list", elements="str"),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = NodeInfo(module.params).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
