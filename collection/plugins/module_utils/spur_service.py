# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Restart a Spur daemon under the host's service manager and return once its probe answers: supervisord through
its XML-RPC interface (no wait for the program's startsecs), systemd through systemctl (Type=notify). Used by
spur_service_restart and by spur_daemon_swap (a rolling upgrade turn's switch, hold and restart in one call)."""

from __future__ import annotations

import configparser
import http.client
import socket
import time
import xmlrpc.client

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


def restart_systemd(params: dict, run_command) -> dict:
    """systemctl restart (Type=notify returns once the daemon is ready), then the probe. run_command is
    AnsibleModule.run_command."""
    name = params["name"]
    began = time.monotonic()
    rc, _out, err = run_command(["systemctl", "restart", name])
    if rc != 0:
        _rc, journal, _err = run_command(
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


def restart(params: dict, run_command) -> dict:
    """Restart params['name'] under params['manager']: the result dict, with failed and msg on a failure."""
    if params["manager"] == "supervisord":
        return restart_supervisord(params)
    return restart_systemd(params, run_command)
