#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_controller_info
short_description: Probe Spur controllers and tell which one leads
version_added: 1.0.0
description:
  - Reads the HTTP probes (C(/status), C(/metrics/nodes), C(/readyz)) of one or several C(spurctld) controllers
    and returns what each says about itself and the Raft cluster, plus a verdict on leadership.
  - A controller that does not answer, or answers as a follower, is a result and never a failure; decide with
    C(until) or C(failed_when) in the play.
  - Never changes anything and needs no library beyond Python itself.
author:
  - Spur contributors (!UNKNOWN)
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
  - module: spur.cluster.spur_cluster_health
  - module: spur.cluster.spur_upgrade_plan
"""

EXAMPLES = r"""
- name: Probe every controller of the inventory
  spur.cluster.spur_controller_info:
    controllers: "{{ groups['spur_controllers'] | map('extract', hostvars, 'spur_probe_addr') | list }}"
    controller_names: "{{ groups['spur_controllers'] }}"
  register: __spur_controllers

- name: Wait until exactly one controller leads
  spur.cluster.spur_controller_info:
    controllers:
      - 127.0.1.1:6822
      - 127.0.1.2:6822
      - 127.0.1.3:6822
  register: __spur_probe
  until: __spur_probe.one_leader
  retries: 30
  delay: 1

- name: Ask one controller about itself
  spur.cluster.spur_controller_info:
    controllers: [http://127.0.0.1:6822]
  register: __spur_self
"""

RETURN = r"""
controllers:
  description: One entry per controller, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The controller's name (from O(controller_names), else its probe address).
      type: str
      sample: ctl-0
    url:
      description: The probe URL that was asked.
      type: str
      sample: http://127.0.1.1:6822
    reachable:
      description: Whether C(/status) answered.
      type: bool
      sample: true
    error:
      description: Why the controller did not answer, else null.
      type: str
      sample: "http://127.0.1.2:6822/status: [Errno 111] Connection refused"
    role:
      description: C(leader), C(follower), C(candidate), C(starting) or C(stalled), as the controller says.
      type: str
      sample: follower
    is_leader:
      description: Whether C(/metrics/nodes) answered 200, which a controller does only as a leader with a quorum.
      type: bool
      sample: false
    ready:
      description: Whether C(/readyz) answered 200.
      type: bool
    leader:
      description: The Raft address of the leader this controller knows of.
      type: str
      sample: 127.0.1.1:6821
    leader_grpc:
      description: The gRPC address of that leader.
      type: str
    term:
      description: The Raft term this controller is in.
      type: int
      sample: 3
    members:
      description: The committed membership (Raft addresses) as this controller knows it.
      type: list
      elements: str
    member_info:
      description: What each member announced about its release (gRPC address, version, build, max_level).
      type: dict
    commit_index:
      description: Raft commit index.
      type: int
    applied_index:
      description: Raft index applied to the state machine.
      type: int
    lag:
      description: Entries this controller's applied index is behind the leader's commit index (null without a leader).
      type: int
      sample: 0
    version:
      description: Release version this controller runs.
      type: str
      sample: 0.1.0
    build:
      description: Build (content hash) this controller runs.
      type: str
      sample: 3f2a9c81d0e4
    wal_level:
      description: The cluster's enabled WAL level as this controller knows it.
      type: int
    max_wal_level:
      description: The highest WAL level this controller's code reads.
      type: int
    cluster_id:
      description: The cluster's id (empty before the first bootstrap).
      type: str
    cluster_name:
      description: The cluster's name.
      type: str
    raft_addr:
      description: This controller's Raft address.
      type: str
    grpc_addr:
      description: This controller's gRPC address, reachable from here.
      type: str
    phase:
      description: The daemon's phase (probing, joining, running, stalled).
      type: str
    has_quorum:
      description: Whether this controller sees a quorum.
      type: bool
    stalled:
      description: Why this controller stopped applying the log, else null.
      type: dict
one_leader:
  description: True when exactly one probed controller answers as leader.
  returned: always
  type: bool
  sample: true
leader:
  description: The name of that leader; null unless RV(one_leader) is true.
  returned: always
  type: str
  sample: ctl-1
leaders:
  description: The names of every controller that answered as leader (more than one means a split view).
  returned: always
  type: list
  elements: str
term:
  description: The leader's term (null without a single leader).
  returned: always
  type: int
members:
  description: The committed membership (Raft addresses), null when no controller knows it yet.
  returned: always
  type: list
  elements: str
cluster_id:
  description: The cluster id, null when no controller knows it yet.
  returned: always
  type: str
wal_level:
  description: The cluster's enabled WAL level, null when unknown.
  returned: always
  type: int
reachable_count:
  description: How many controllers answered.
  returned: always
  type: int
unreachable_controllers:
  description: The names of the controllers that did not answer.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_info import ControllerInfo


def main() -> None:
    module = AnsibleModule(argument_spec=connection_argument_spec(), supports_check_mode=True)
    try:
        result = ControllerInfo(module.params).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
