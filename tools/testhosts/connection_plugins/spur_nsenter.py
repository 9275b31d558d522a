"""community.docker.nsenter with pipelining: one nsenter per module instead of four or five.

The tier 2 test hosts (tools/testhosts) are reached by entering their namespaces. The upstream plugin sends a
module by writing it to a file on the host (tee), marking it executable and running it, then removing the
directory: each of those is a process of its own, started through nsenter and a shell. Its exec_command already
feeds stdin to the command, which is all pipelining needs (the module is given to the host's python on stdin),
so this plugin only says that it can. Enabled by the tier 2 scenarios' molecule.yml (ANSIBLE_CONNECTION_PLUGINS
and ANSIBLE_PIPELINING); the playbooks themselves do not change.
"""

from __future__ import annotations

from ansible_collections.community.docker.plugins.connection.nsenter import DOCUMENTATION as _UPSTREAM_DOCUMENTATION
from ansible_collections.community.docker.plugins.connection.nsenter import Connection as _NsenterConnection

DOCUMENTATION = _UPSTREAM_DOCUMENTATION.replace("name: nsenter", "name: spur_nsenter", 1)


class Connection(_NsenterConnection):
    transport = "spur_nsenter"
    has_pipelining = True
