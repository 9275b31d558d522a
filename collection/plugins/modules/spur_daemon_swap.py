#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_daemon_swap
short_description: Put a host's Spur daemon on its staged release in one call (hold, switch, restart)
version_added: 1.0.0
description:
  - The work of one turn of the rolling upgrade, in one module call instead of three (each call costs Ansible
    0.3-0.7 s). First, optionally, it holds new dispatch to the agent's node (as M(spur.cluster.spur_dispatch_hold) with
    O(hold_node)); then it switches C(PREFIX/current) to the release staged from O(release) (as
    M(spur.cluster.spur_release) with O(release.src); a staged release only moves the links); then it restarts
    the daemon O(name) (as M(spur.cluster.spur_service_restart)), returning as soon as the new process answers its
    probe.
  - A step that fails stops there; the daemon is restarted only once the switch succeeded, so a failed switch
    leaves the old process running. A hold set before a failed switch ends when the node's agent registers
    again or after the controllers' C(heartbeat_timeout_secs).
  - With O(wait_registered), it then waits until the controllers list the agent's node registered at the target
    release.
  - Returns how long each step took (RV(steps)), which the rolling upgrade's event log (the spur_upgrade_log
    callback) records as separate steps.
author:
  - Spur contributors (!UNKNOWN)
options:
  name:
    description:
      - The program (supervisord) or unit (systemd) to restart.
    type: str
    required: true
  manager:
    description:
      - The host's service manager.
    type: str
    choices: [supervisord, systemd]
    required: true
  supervisord_conf:
    description:
      - The supervisord configuration file (required with O(manager=supervisord)).
    type: path
  probe:
    description:
      - The daemon's HTTP probe address (host:port); the restart returns once O(ready_path) answers 200 there.
    type: str
  ready_path:
    description:
      - The probe path that answers 200 once the daemon is up (C(/readyz) for C(spurd), C(/livez) for C(spurctld)).
    type: str
    default: /livez
  start_timeout:
    description:
      - Seconds to wait for the stop and then for the probe to answer.
    type: float
    default: 60
  log_lines:
    description:
      - How many lines of the daemon's log a failed restart quotes.
    type: int
    default: 10
  release:
    description:
      - The release to switch to, as M(spur.cluster.spur_release) takes it with O(spur.cluster.spur_release#module:state=current).
    type: dict
    required: true
    suboptions:
      src:
        description: The release directory on the host.
        type: path
        required: true
      prefix:
        description: Where releases live.
        type: path
        default: /opt/spur
      bin_dir:
        description: Where the command links go (default C(PREFIX/bin)).
        type: path
      python:
        description: The Python the release's venv is made from, if it is not staged yet.
        type: path
  hold_node:
    description:
      - An agent's node to hold new dispatch to before the restart, until its agent registers again (or at most
        the controllers' C(heartbeat_timeout_secs)). Omitted, nothing is held (a controller's turn, or drained).
    type: str
  wait_registered:
    description:
      - After C(spurd)'s restart, wait until the controllers list O(wait_registered.node) registered at
        O(wait_registered.version) and O(wait_registered.build) (and, with O(wait_registered.agent_probe), until
        the agent's own C(/status) reports that version), as the C(registered) step (the gate of an agent's turn,
        polled here instead of by a task that Ansible runs again each second). Its record is returned in RV(nodes).
      - Omitted, the module returns once the daemon's probe answers.
    type: dict
    suboptions:
      node:
        description: The node's name.
        type: str
        required: true
      agent_probe:
        description: The agent's probe address (host:port).
        type: str
      version:
        description: The version the node must register with.
        type: str
        required: true
      build:
        description: The build the node must register with.
        type: str
        required: true
      timeout:
        description: Seconds to wait after the restart; then the module fails, saying what was missing.
        type: float
        default: 60
      poll_interval:
        description: Seconds between two looks.
        type: float
        default: 0.25
  hold_on_unsupported:
    description:
      - What to do when the cluster's WAL level is below the hold's (4), as O(spur.cluster.spur_dispatch_hold#module:on_unsupported).
    type: str
    choices: [fail, skip]
    default: skip
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode nothing is held, switched or restarted, and the task reports a change.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
seealso:
  - module: spur.cluster.spur_release
  - module: spur.cluster.spur_dispatch_hold
  - module: spur.cluster.spur_service_restart
"""

EXAMPLES = r"""
- name: Hold, switch and restart spurd on the staged release, then wait until the node registers at it
  spur.cluster.spur_daemon_swap:
    controllers: "{{ spur_controller_probes }}"
    name: spurd
    manager: supervisord
    supervisord_conf: /etc/spur/supervisord.conf
    probe: 127.0.0.1:6823
    ready_path: /readyz
    release:
      src: /var/tmp/spur-release-0.2.0
      prefix: /opt/spur
    hold_node: node-3
    wait_registered:
      node: node-3
      agent_probe: 127.0.0.1:6823
      version: 0.2.0
      build: 3f2a9c1d
      timeout: 60
"""

RETURN = r"""
steps:
  description:
    - The steps done, in order, each with C(step) (V(dispatch_hold), V(switch), V(swap), V(started),
      V(registered)), C(kind) (V(info), V(work) or V(gate)) and C(secs). V(swap) is the stop and the spawn;
      V(started) is the daemon's own start until its probe answered; V(registered) (with O(wait_registered)) the
      wait until the controllers listed the node at the target.
  returned: success
  type: list
  elements: dict
hold:
  description: What M(spur.cluster.spur_dispatch_hold) returns (C(held), C(hold_until), C(wal_level)); null without O(hold_node).
  returned: success
  type: dict
release_id:
  description: The release C(current) now points to.
  returned: success
  type: str
  sample: 0.2.0-3f2a9c1d
pid:
  description: The new process's id (supervisord only; 0 under systemd).
  returned: success
  type: int
start_secs:
  description: Seconds from the start request until the probe answered.
  returned: success
  type: float
nodes:
  description: With O(wait_registered), the node as M(spur.cluster.spur_node_info) returns it (with the agent's
    running jobs and their supervisors), at the last look.
  returned: when O(wait_registered) is given
  type: list
  elements: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_dispatch import DispatchHold
from ansible_collections.spur.cluster.plugins.module_utils.spur_info import check_wait_registered, wait_registered
from ansible_collections.spur.cluster.plugins.module_utils.spur_release import ReleaseInstall
from ansible_collections.spur.cluster.plugins.module_utils.spur_service import restart


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        name=dict(type="str", required=True),
        manager=dict(type="str", choices=["supervisord", "systemd"], required=True),
        supervisord_conf=dict(type="path"),
        probe=dict(type="str"),
        ready_path=dict(type="str", default="/livez"),
        start_timeout=dict(type="float", default=60),
        log_lines=dict(type="int", default=10),
        release=dict(type="dict", required=True, options=dict(
            src=dict(type="path", required=True),
            prefix=dict(type="path", default="/opt/spur"),
            bin_dir=dict(type="path"),
            python=dict(type="path"),
        )),
        hold_node=dict(type="str"),
        wait_registered=dict(type="dict", options=dict(
            node=dict(type="str", required=True),
            agent_probe=dict(type="str"),
            version=dict(type="str", required=True),
            build=dict(type="str", required=True),
            timeout=dict(type="float", default=60),
            poll_interval=dict(type="float", default=0.25),
        )),
        hold_on_unsupported=dict(type="str", choices=["fail", "skip"], default="skip"),
    )
    return spec


def swap(params: dict, run_command, clock=time.monotonic) -> dict:
    """Hold (if asked), switch, restart; the result with each step's seconds, or failed and msg naming the step."""
    steps: list[dict] = []
    result: dict = dict(changed=False, steps=steps, hold=None)

    def step(name: str, kind: str, since: float) -> None:
        steps.append(dict(step=name, kind=kind, secs=round(clock() - since, 3)))

    if params.get("wait_registered"):
        check_wait_registered(params["wait_registered"])  # before anything is held, switched or restarted
    since = clock()
    if params.get("hold_node"):
        try:
            hold = DispatchHold(dict(params, name=params["hold_node"], hold_secs=0,
                                     on_unsupported=params["hold_on_unsupported"])).run()
        except SpurError as exc:  # say which step failed: nothing was switched or restarted
            exc.message = "holding dispatch to node %s (nothing switched or restarted yet): %s" % (
                params["hold_node"], exc.message)
            raise
        result["warnings"] = hold.pop("warnings", [])
        result.update(hold=dict(held=hold["held"], hold_until=hold["hold_until"], wal_level=hold["wal_level"]),
                      changed=hold["changed"])
        step("dispatch_hold", "info", since)
    since = clock()
    try:
        switched = ReleaseInstall(dict(params["release"], release=None, state="current")).run()
    except SpurError as exc:  # the daemon still runs its old release, untouched
        exc.message = "switching to the staged release (%s not restarted): %s" % (params["name"], exc.message)
        raise
    result.update(release_id=switched["release_id"], changed=result["changed"] or switched["changed"])
    step("switch", "work", since)
    since = clock()
    restarted = restart(dict(params, timeout=params["start_timeout"]), run_command)
    if restarted.pop("failed", False):
        return dict(result, failed=True, msg=restarted["msg"])
    start_secs = restarted["start_secs"]
    steps.append(dict(step="swap", kind="work", secs=round(max(0.0, clock() - since - start_secs), 3)))
    steps.append(dict(step="started", kind="gate", secs=start_secs))
    result.update(restarted, changed=True)
    expect = params.get("wait_registered")
    if expect:
        since = clock()
        node, problem = wait_registered(params, expect, clock)
        result["nodes"] = [node] if node else []
        if problem:
            return dict(result, failed=True, msg="%s restarted on the target release, but node %s did not register "
                        "at it within %g s: %s" % (params["name"], expect["node"], expect["timeout"], problem))
        steps.append(dict(step="registered", kind="gate", secs=round(clock() - since, 3)))
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("manager", "supervisord", ["supervisord_conf"])],
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=True, steps=[], hold=None)
    try:
        result = swap(module.params, module.run_command)
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
