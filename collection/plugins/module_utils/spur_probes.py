# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The controllers' and agents' HTTP probes: where they are (the controllers and controller_names options) and
what /status, /metrics/nodes and /readyz say, one record per daemon. Never raises for a daemon that is down.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request

from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurInvalid, SpurUnreachable
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import (
    CONTROLLER_GRPC_PORT,
    CONTROLLER_PROBE_PORT,
    address_host,
    join_host_port,
    split_host_port,
    with_port,
)


def probe_url(address: str, port: int = CONTROLLER_PROBE_PORT) -> str:
    """A probe endpoint as a base URL: 'http://h:p', 'h:p' and 'h' are accepted (port defaults to port)."""
    text = address.strip().rstrip("/")
    if not text:
        raise SpurInvalid("an empty probe address was given; use host:port or http://host:port",
                          override="controllers")
    if "://" in text:
        scheme, _sep, rest = text.partition("://")
        if scheme not in ("http", "https"):
            raise SpurInvalid("probe address %r uses %s://; the probes speak http" % (address, scheme),
                              override="controllers")
        host = rest.split("/", 1)[0]
        return "%s://%s" % (scheme, with_port(host, port))
    return "http://%s" % with_port(text, port)


def controller_endpoints(params: dict) -> list[tuple[str, str]]:
    """[(name, probe URL)] in the order given; names default to host:port of each probe."""
    addresses = params.get("controllers") or []
    if not addresses:
        raise SpurInvalid("controllers is empty; give at least one controller probe address (host:port)",
                          override="controllers")
    urls = [probe_url(a) for a in addresses]
    names = params.get("controller_names")
    if names:
        if len(names) != len(urls):
            raise SpurInvalid("controller_names has %d names but controllers has %d addresses; give one name per "
                              "controller, in the same order" % (len(names), len(urls)),
                              override="controller_names")
    else:
        names = [u.partition("://")[2] for u in urls]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise SpurInvalid("controller names must be unique; %s appear more than once" % ", ".join(dupes),
                          override="controller_names")
    return list(zip(names, urls))


# ---------------------------------------------------------------------------------------------- HTTP probes


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A probe's answer is its own status: a redirect is returned as it came (an HTTPError), never followed."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENERS: dict = {}


def _opener(https: bool):
    """One opener per process and scheme, without proxies (the probes are on the cluster's own network). The
    standard library's urllib, not ansible.module_utils.urls: every module call would compile that from source,
    and build a TLS context (reading the CA store) that a plain-HTTP probe never uses."""
    if https not in _OPENERS:
        handlers = [urllib.request.ProxyHandler({}), _NoRedirect()]
        if https:
            import ssl

            handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context()))
        _OPENERS[https] = urllib.request.build_opener(*handlers)
    return _OPENERS[https]


def http_get(url: str, timeout: float) -> tuple[int, str]:
    """(status, body) of a GET; any HTTP status is an answer. Raises SpurUnreachable when nothing answers."""
    request = urllib.request.Request(url, headers={"User-Agent": "spur.cluster"})
    try:
        with _opener(url.startswith("https://")).open(request, timeout=timeout) as response:
            return response.getcode(), response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        try:
            body = exc.read().decode("utf-8", "replace")
        except Exception:  # the body of an error answer is a courtesy; its status is what counts
            body = ""
        return exc.code, body
    except urllib.error.URLError as exc:
        raise SpurUnreachable("%s: %s" % (url, exc.reason)) from None
    except (socket.timeout, TimeoutError):
        raise SpurUnreachable("%s: no answer within %.1f s" % (url, timeout)) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, reset, a garbled answer
        raise SpurUnreachable("%s: %s" % (url, exc)) from None


def get_json(url: str, timeout: float) -> dict:
    """GET url and parse a JSON object; SpurUnreachable for no answer or a non-200 / non-JSON answer."""
    code, body = http_get(url, timeout)
    if code != 200:
        raise SpurUnreachable("%s answered HTTP %d: %s" % (url, code, body.strip()[:200]))
    try:
        data = json.loads(body)
    except ValueError:
        raise SpurUnreachable("%s did not answer JSON (%r...); is this a Spur probe port?" % (url, body[:60])) from None
    if not isinstance(data, dict):
        raise SpurUnreachable("%s answered JSON that is not an object; is this a Spur probe port?" % url)
    return data


_CONTROLLER_FIELDS = (
    "role", "leader", "leader_grpc", "term", "members", "learners", "member_info", "commit_index", "applied_index",
    "version", "build", "wal_level", "max_wal_level", "cluster_id", "cluster_name", "raft_addr", "grpc_addr",
    "phase", "has_quorum", "stalled", "joining", "term_secs",
)


def probe_controller(name: str, url: str, timeout: float) -> dict:
    """Everything one controller's probes say about it. Never raises for a down controller.

    is_leader comes from /metrics/nodes (200 only on a leader that holds a quorum), role from /status.
    """
    record = dict(name=name, url=url, reachable=False, error=None, is_leader=False, ready=False, lag=None)
    for key in _CONTROLLER_FIELDS:
        record[key] = None
    try:
        status = get_json(url + "/status", timeout)
    except SpurUnreachable as exc:
        record["error"] = exc.message
        return record
    record["reachable"] = True
    for key in _CONTROLLER_FIELDS:
        record[key] = status.get(key)
    record["lag_map"] = status.get("lag")
    for path, key in (("/metrics/nodes", "is_leader"), ("/readyz", "ready")):
        try:
            record[key] = http_get(url + path, timeout)[0] == 200
        except SpurUnreachable as exc:
            record["error"] = exc.message
    record["grpc_addr"] = reachable_grpc_addr(record.get("grpc_addr"), url)
    record["leader_grpc"] = reachable_grpc_addr(record.get("leader_grpc"), url)
    return record


def reachable_grpc_addr(address: str | None, via_url: str) -> str | None:
    """A wildcard listen address (0.0.0.0:6817) is reached through the host its probe answered on."""
    if not address:
        return None
    try:
        host, port = split_host_port(address, CONTROLLER_GRPC_PORT)
    except ValueError:
        return address  # not ours to judge here: the gRPC call names the address if it cannot be dialled
    if host in ("0.0.0.0", "::"):
        return join_host_port(address_host(via_url), port)
    return address


def probe_agent(url: str, timeout: float) -> dict:
    """An agent's /status: node, registered, controller, running_jobs, version, build (reachable false if down)."""
    record = dict(url=url, reachable=False, error=None, node=None, registered=None, controller=None,
                  running_jobs=[], version=None, build=None)
    try:
        status = get_json(url + "/status", timeout)
    except SpurUnreachable as exc:
        record["error"] = exc.message
        return record
    record["reachable"] = True
    for key in ("node", "registered", "controller", "version", "build"):
        record[key] = status.get(key)
    record["running_jobs"] = [
        dict(job_id=r.get("job_id"), attempt=r.get("attempt"), supervisor_pid=r.get("supervisor_pid"))
        for r in status.get("running_jobs") or []
    ]
    return record
