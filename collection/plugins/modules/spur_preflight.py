#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_preflight
short_description: Refuse a Spur deploy or upgrade that would hurt the cluster
version_added: 1.0.0
description:
  - Probes the controllers and checks the run's flags against what it finds. Every rule that fails is named in
    one message, each with the option that overrides it where one exists; nothing is changed.
  - B(Wipe during an upgrade) is refused, with no override (an upgrade never wipes).
  - B(Busy-agent modes) allow at most one of O(skip_busy_agents), O(force_upgrade_busy_agents) and
    O(in_place_upgrade).
  - B(Topology change) is refused unless O(wipe=true). O(members) must equal the committed membership the
    controllers report; the message names the controllers that would be added or removed and the playbooks
    (add_controllers, remove_controllers) that change the set online.
  - B(WAL skew) is refused with no override (roll forward instead). The target release must read the cluster's
    enabled WAL level (see O(target_max_wal_level)).
  - B(Downgrade) is refused unless O(allow_downgrade=true). O(target_version) must not be older than what the
    controllers run.
  - B(Health), for upgrades only, is refused unless O(require_healthy=false). One controller must lead, every
    controller must answer, and every member must be within O(max_lag) entries.
author:
  - Spur contributors (!UNKNOWN)
options:
  upgrade:
    description:
      - Whether this run is a rolling upgrade (V(true)) or a deploy (V(false)). A deploy may be what repairs an
        unhealthy cluster, so the health rule applies to upgrades only.
    type: bool
    default: true
  wipe:
    description:
      - The run's C(spur_wipe_state) flag.
    type: bool
    default: false
  skip_busy_agents:
    description:
      - The run's C(spur_skip_busy_agents) flag.
    type: bool
    default: false
  force_upgrade_busy_agents:
    description:
      - The run's C(spur_force_upgrade_busy_agents) flag.
    type: bool
    default: false
  in_place_upgrade:
    description:
      - The run's C(spur_in_place_upgrade) flag.
    type: bool
    default: false
  members:
    description:
      - The controllers' Raft addresses as the inventory describes them (C(host:port), port 6821 when omitted).
      - Compared with the committed membership when a controller answers; not checked when omitted.
    type: list
    elements: str
  target_version:
    description:
      - The version being installed, for the downgrade rule.
    type: str
  target_max_wal_level:
    description:
      - The highest WAL level the target release reads (RV(spur.cluster.spur_release#module:max_wal_level)).
    type: int
  allow_downgrade:
    description:
      - Let O(target_version) be older than what runs now.
    type: bool
    default: false
  require_healthy:
    description:
      - Refuse an upgrade of a cluster that is not healthy.
    type: bool
    default: true
  max_lag:
    description:
      - The most entries a member may be behind the leader for the health rule.
    type: int
    default: 100
  health_wait:
    description:
      - For an upgrade, seconds to wait first for a healthy cluster with a stable leader, as
        M(spur.cluster.spur_cluster_health) does (a controller may still be starting after an interrupted run),
        before the rules judge what the controllers say. V(0) judges the first look. What the wait saw is in
        RV(health); the rules then judge the cluster as it is, whether the wait ended healthy or not.
    type: float
    default: 0
  stable_for:
    description:
      - With O(health_wait), the seconds one leader must have held its term. A controller that reports how long
        its term has lasted (C(term_secs)) lets one look decide.
    type: float
    default: 3
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
  - module: spur.cluster.spur_upgrade_plan
  - module: spur.cluster.spur_release
"""

EXAMPLES = r"""
- name: Guard rails before a rolling upgrade
  spur.cluster.spur_preflight:
    controllers: "{{ groups['spur_controllers'] | map('extract', hostvars, 'spur_probe_addr') | list }}"
    members: "{{ groups['spur_controllers'] | map('extract', hostvars, 'spur_raft_addr') | list }}"
    upgrade: true
    wipe: "{{ spur_wipe_state | bool }}"
    skip_busy_agents: "{{ spur_skip_busy_agents | bool }}"
    force_upgrade_busy_agents: "{{ spur_force_upgrade_busy_agents | bool }}"
    in_place_upgrade: "{{ spur_in_place_upgrade | bool }}"
    target_version: "{{ __spur_release.version }}"
    target_max_wal_level: "{{ __spur_release.max_wal_level }}"

- name: Guard rails before a deploy
  spur.cluster.spur_preflight:
    upgrade: false
    wipe: "{{ spur_wipe_state | bool }}"
    members: [127.0.1.1:6821, 127.0.1.2:6821, 127.0.1.3:6821]
"""

RETURN = r"""
passed:
  description: True when no rule refused (a failed task has it false).
  returned: always
  type: bool
  sample: true
refusals:
  description: Each rule that refused, with C(check), C(message) and C(override) (the option, or null).
  returned: always
  type: list
  elements: dict
  sample:
    - check: downgrade
      message: the target version 0.9.0 is older than 1.0.0, which the cluster runs now
      override: allow_downgrade
facts:
  description:
    - What the rules were checked against, including committed_members, running_versions, running_builds,
      cluster_wal_level, cluster_id and health_problems.
  returned: always
  type: dict
health:
  description:
    - With O(health_wait), what the wait saw last (C(healthy), C(unmet), C(waited), C(leader), C(term)); null
      without it.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_upgrade import Preflight


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        upgrade=dict(type="bool", default=True),
        wipe=dict(type="bool", default=False),
        # Not mutually_exclusive in the spec: plays pass all three flags, and two false values are fine.
        skip_busy_agents=dict(type="bool", default=False),
        force_upgrade_busy_agents=dict(type="bool", default=False),
        in_place_upgrade=dict(type="bool", default=False),
        members=dict(type="list", elements="str"),
        target_version=dict(type="str"),
        target_max_wal_level=dict(type="int"),
        allow_downgrade=dict(type="bool", default=False),
        require_healthy=dict(type="bool", default=True),
        max_lag=dict(type="int", default=100),
        health_wait=dict(type="float", default=0),
        stable_for=dict(type="float", default=3),
    )
    return spec


def main() -> None:
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    try:
        result = Preflight(module.params).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
