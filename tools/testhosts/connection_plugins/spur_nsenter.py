"""community.docker.nsenter with pipelining: one nsenter per module instead of four or five.

The tier 2 test hosts (tools/testhosts) are reached by entering their namespaces. The upstream plugin sends a
module by writing it to a file on the host (tee), marking it executable and running it, then removing the
directory: each of those is a process of its own, started through nsenter and a shell. Its exec_command already
feeds stdin to the command, which is all pipelining needs (the module is given to the host's python on stdin),
so this plugin says that it can. A host that cannot be entered (its PID 1 is gone: a crashed host) is
unreachable, as it is upstream, where the step that makes the temporary directory fails first. Enabled by the
tier 2 scenarios' molecule.yml (ANSIBLE_CONNECTION_PLUGINS) and inventories; the playbooks do not change.
"""

from __future__ import annotations

from ansible.errors import AnsibleConnectionFailure
from ansible_collections.community.docker.plugins.connection.nsenter import DOCUMENTATION as _UPSTREAM_DOCUMENTATION
from ansible_collections.community.docker.plugins.connection.nsenter import Connection as _NsenterConnection

DOCUMENTATION = _UPSTREAM_DOCUMENTATION.replace("name: nsenter", "name: spur_nsenter", 1)


class Connection(_NsenterConnection):
    transport = "spur_nsenter"
    has_pipelining = True

    def exec_command(self, cmd, in_data=None, sudoable=True):
        rc, out, err = super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        # nsenter's own refusal, before anything ran on the host: "nsenter: cannot open /proc/PID/ns/ipc: ..."
        if rc != 0 and err.startswith(b"nsenter: "):
            raise AnsibleConnectionFailure(f"cannot enter the host: {err.decode(errors='replace').strip()}")
        return rc, out, err
