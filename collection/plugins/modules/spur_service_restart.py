#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_service_restart
short_description: Restart a Spur daemon and return as soon as it answers its probe, or fail at once when it dies
version_added: 1.0.0
description:
  - Restarts C(spurd) or C(spurctld) under the host's service manager, as the rolling upgrade's turn does, and
    returns as soon as the new process answers its probe (O(ready_path)), instead of after a fixed wait.
  - Under supervisord the restart goes through its XML-RPC interface (the C([supervisorctl] serverurl) of
    O(supervisord_conf)), a stop and then a start without waiting for the program's C(startsecs), which
    C(supervisorctl restart) always waits out (2 s for the programs the spur_service role writes). The process is
    then watched until its probe answers; one that exits or backs off first fails the task at once, with its
    name, how it ended and the end of its log.
  - Under systemd C(systemctl restart) already returns when the daemon reports ready (C(Type=notify)); a
    failure names the unit and gives the end of its journal.
  - Whether the daemon is healthy (registered, on the target build, a stable leader) is for the health gate that
    follows, not for this module.
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
      - The supervisord configuration file; its C([supervisorctl] serverurl) (or C([unix_http_server] file))
        says where supervisord listens. Required with O(manager=supervisord).
    type: path
  probe:
    description:
      - The daemon's HTTP probe address (host:port); the task returns once O(ready_path) answers 200 there.
      - Without it the task returns as soon as the new process is spawned.
    type: str
  ready_path:
    description:
      - The probe path that answers 200 once the daemon is up. C(spurd)'s C(/readyz) answers once it has
        registered with a controller; C(spurctld)'s only with a leader, so give it C(/livez).
    type: str
    default: /livez
  timeout:
    description:
      - Seconds to wait for the stop and then for the probe to answer.
    type: float
    default: 60
  log_lines:
    description:
      - How many lines of the daemon's log a failure quotes.
    type: int
    default: 10
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - In check mode nothing restarts, and the task reports a change.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
seealso:
  - module: spur.cluster.spur_node_info
  - module: spur.cluster.spur_cluster_health
"""

EXAMPLES = r"""
- name: Restart spurd on its new release
  spur.cluster.spur_service_restart:
    name: spurd
    manager: supervisord
    supervisord_conf: /etc/spur/supervisord.conf
    probe: 127.0.0.1:6823
"""

RETURN = r"""
pid:
  description: The new process's id (supervisord only; 0 under systemd).
  returned: success
  type: int
  sample: 4242
stop_secs:
  description: Seconds the old process took to stop (under systemd, the whole of C(systemctl restart)).
  returned: success
  type: float
  sample: 0.3
start_secs:
  description:
    - Seconds from the start request until the probe answered (or the process was spawned). Under systemd, from
      C(systemctl restart)'s return (the daemon reported ready) until the probe answered.
  returned: success
  type: float
  sample: 0.6
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_service import restart


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            manager=dict(type="str", choices=["supervisord", "systemd"], required=True),
            supervisord_conf=dict(type="path"),
            probe=dict(type="str"),
            ready_path=dict(type="str", default="/livez"),
            timeout=dict(type="float", default=60),
            log_lines=dict(type="int", default=10),
        ),
        required_if=[("manager", "supervisord", ["supervisord_conf"])],
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=True)
    result = restart(module.params, module.run_command)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
