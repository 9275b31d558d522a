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

import configparser
import http.client
import socket
import time
import xmlrpc.client

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurUnreachable
from ansible_collections.spur.cluster.plugins.module_utils.spur_probes import http_get, probe_url

# supervisord's process states (supervisor/states.py): a process in one of these is not running, nor about to.
_DEAD = ("STOPPED", "EXITED", "FATAL", "BACKOFF", "UNKNOWN")
_POLL_SECS = 0.05


class _UnixTransport(xmlrpc.client.Transport):
    """XML-RPC over supervisord's unix socket (the standard library speaks only TCP)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__()
        self.path = path
        self.timeout = timeout

    def make_connection(self, host):
        path, timeout = self.path, self.timeout

        class _Connection(http.client.HTTPConnection):
            def connect(self) -> None:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(path)

        return _Connection("localhost")


def supervisord_server(conf_path: str, timeout: float = 10.0):
    """An XML-RPC proxy of the supervisord that conf_path configures; ValueError naming what is missing."""
    parser = configparser.RawConfigParser(inline_comment_prefixes=(";",), strict=False)
    if not parser.read(conf_path):
        raise ValueError("cannot read the supervisord configuration %s; give the supervisord_conf the spur_service "
                         "role wrote" % conf_path)
    url = parser.get("supervisorctl", "serverurl", fallback="")
    if not url and parser.has_option("unix_http_server", "file"):
        url = "unix://" + parser.get("unix_http_server", "file")
    if url.startswith("unix://"):
        return xmlrpc.client.ServerProxy("http://localhost/RPC2", transport=_UnixTransport(url[7:], timeout))
    if url.startswith("http://"):
        return xmlrpc.client.ServerProxy(url.rstrip("/") + "/RPC2")
    raise ValueError("%s names no supervisord server ([supervisorctl] serverurl or [unix_http_server] file)"
                     % conf_path)


def _log_tail(server, name: str, lines: int) -> str:
    try:
        text = server.supervisor.tailProcessStdoutLog(name, 0, 8192)[0]
    except (xmlrpc.client.Fault, OSError):
        return ""
    return " | ".join(line for line in text.strip().splitlines()[-lines:] if line.strip())


def _probe_answers(url: str) -> bool:
    try:
        code, _body = http_get(url, timeout=0.5)
    except SpurUnreachable:
        return False
    return code == 200


def restart_supervisord(params: dict) -> dict:
    """Stop, start without the startsecs wait, watch until the probe answers; dict of the result or 'msg' failed."""
    name, deadline_secs = params["name"], params["timeout"]
    try:
        server = supervisord_server(params["supervisord_conf"])
        rpc = server.supervisor
        began = time.monotonic()
        if rpc.getProcessInfo(name)["statename"] not in ("STOPPED", "EXITED", "FATAL"):
            rpc.stopProcess(name, True)
        stopped = time.monotonic()
        rpc.startProcess(name, False)
    except xmlrpc.client.Fault as exc:
        return {"failed": True, "msg": "supervisord could not restart %s: %s" % (name, exc.faultString)}
    except (OSError, ValueError) as exc:
        return {"failed": True, "msg": "cannot reach supervisord to restart %s (%s): %s"
                % (name, params["supervisord_conf"], exc)}
    url = probe_url(params["probe"]) + params["ready_path"] if params.get("probe") else None
    deadline = time.monotonic() + deadline_secs
    while True:
        try:
            info = rpc.getProcessInfo(name)
        except (xmlrpc.client.Fault, OSError) as exc:
            return {"failed": True, "msg": "supervisord stopped answering about %s after its restart: %s" % (name, exc)}
        if info["statename"] in _DEAD:
            # supervisord records the exit status of a process that ran past startsecs only (EXITED).
            how = ("exit status %s" % info.get("exitstatus") if info["statename"] == "EXITED"
                   else info.get("spawnerr") or "exited")
            return {
                "failed": True,
                "msg": "%s died at once after its restart (%s: %s); its log ends: %s"
                % (name, info["statename"], how, _log_tail(server, name, params["log_lines"]) or "(empty)"),
            }
        if url is None or _probe_answers(url):
            now = time.monotonic()
            return {"changed": True, "pid": info.get("pid", 0), "stop_secs": round(stopped - began, 3),
                    "start_secs": round(now - stopped, 3)}
        if time.monotonic() > deadline:
            return {"failed": True, "msg": "%s runs (pid %s) but its probe %s did not answer 200 within %g s; "
                    "its log ends: %s" % (name, info.get("pid"), url, deadline_secs,
                                          _log_tail(server, name, params["log_lines"]) or "(empty)")}
        time.sleep(_POLL_SECS)


def restart_systemd(module: AnsibleModule) -> dict:
    """systemctl restart (Type=notify returns once the daemon is ready), then the probe."""
    params = module.params
    name = params["name"]
    began = time.monotonic()
    rc, _out, err = module.run_command(["systemctl", "restart", name])
    if rc != 0:
        _rc, journal, _err = module.run_command(
            ["journalctl", "-u", name, "-n", str(params["log_lines"]), "--no-pager", "-o", "cat"])
        return {"failed": True, "msg": "systemctl restart %s failed (exit %d): %s; its journal ends: %s"
                % (name, rc, err.strip(), " | ".join(journal.strip().splitlines()) or "(empty)")}
    url = probe_url(params["probe"]) + params["ready_path"] if params.get("probe") else None
    ready = time.monotonic()
    deadline = ready + params["timeout"]
    while url is not None and not _probe_answers(url):
        if time.monotonic() > deadline:
            return {"failed": True, "msg": "%s restarted but its probe %s did not answer 200 within %g s; "
                    "see journalctl -u %s" % (name, url, params["timeout"], name)}
        time.sleep(_POLL_SECS)
    return {"changed": True, "pid": 0, "stop_secs": round(ready - began, 3),
            "start_secs": round(time.monotonic() - ready, 3)}


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
    if module.params["manager"] == "supervisord":
        result = restart_supervisord(module.params)
    else:
        result = restart_systemd(module)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
