# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every spur.cluster module reaches the controllers (declared once, reused by every module)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  controllers:
    description:
      - The controllers' HTTP probe endpoints (C(probe_addr) of C(spurctld)), as C(http://host:port),
        C(host:port) or C(host); the port defaults to 6822.
      - Modules that call the gRPC API learn each controller's gRPC address from its C(/status) probe, so
        this list is usually all a module needs.
      - Give them in inventory order; that order is the fallback order of M(spur.cluster.spur_upgrade_plan).
    type: list
    elements: str
    default: ['http://127.0.0.1:6822']
  controller_names:
    description:
      - A name for each controller, in the same order as O(controllers), used in results and in
        O(spur.cluster.spur_upgrade_plan#module:order). Usually the inventory hostnames.
      - Defaults to the C(host:port) of each probe address.
    type: list
    elements: str
  grpc_hosts:
    description:
      - The controllers' gRPC addresses (C(host:port), port 6817 when omitted), for modules that call the API.
      - When omitted, the addresses the probes report are used. The current leader is always tried first.
    type: list
    elements: str
  timeout:
    description:
      - Seconds to wait for one probe request or one gRPC call.
    type: float
    default: 5.0
  auth_type:
    description:
      - How gRPC calls prove who is asking (the controllers' C([auth] type)).
      - V(munge) sends a credential from the host's C(munged), which vouches for the user the module runs as;
        changing nodes and the WAL level needs root or a user in C([auth] admins).
      - V(none) sends a bare claim of the module's uid, which only a C(type = none) cluster (a local demo) accepts.
      - V(auto) uses MUNGE when O(munge_socket) exists, else a bare claim.
    type: str
    choices: [auto, munge, none]
    default: auto
  munge_socket:
    description:
      - The C(munged) socket. Defaults to C($SPUR_MUNGE_SOCKET), else C(/run/munge/munge.socket.2).
    type: path
requirements:
  - Python 3.11 or later on the managed host.
  - Nothing beyond Python's standard library, Spur release or not; the gRPC client is part of the collection.
  - With O(auth_type=munge) (or V(auto) and a C(munged) socket), C(libmunge) on the managed host (Debian package
    C(munge)).
notes:
  - Probes are plain HTTP GETs that bypass any configured proxy.
"""
