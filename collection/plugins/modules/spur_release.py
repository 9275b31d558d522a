#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_release
short_description: Install a Spur release on a host and make it current, or roll back
version_added: 1.0.0
description:
  - With O(state=current), verifies the release directory O(src) (built by C(spur-release build)) against its
    checksums, installs it as a venv in C(PREFIX/releases/<version>-<build>/), switches the C(PREFIX/current) link
    to it atomically and keeps the release it replaces as C(PREFIX/previous). Command links go in O(bin_dir).
  - The release is identified by its content (the build hash), so re-running with the same release changes
    nothing, and a rebuilt release with the same version is a change.
  - With O(state=staged), installs O(src) the same way beside the running release and checks that every command
    of it answers C(--version) with the release's build, but switches nothing, so what runs is untouched (only
    releases that neither the links nor a running process use are removed). A release already complete in the
    prefix is only checked. A later O(state=current) then only moves the links.
  - With O(state=rolled_back), if the release is current, C(PREFIX/current) goes back to C(PREFIX/previous);
    if it is not current there is nothing to do.
  - The installing is done by the installer inside the release's own wheel, so the host needs only a Python of
    the version the release was built for (no spur-hpc beforehand).
  - Installing does not restart daemons; the play restarts them.
author:
  - Spur contributors (!UNKNOWN)
options:
  src:
    description:
      - The release directory on the managed host (holding C(release.json), the wheel, C(wheels/) and
        C(SHA256SUMS)).
    type: path
  release:
    description:
      - The id (C(<version>-<build>)) of an installed release, instead of O(src), for O(state=rolled_back).
    type: str
  state:
    description:
      - V(current) installs O(src) and switches to it; V(staged) installs it without switching; V(rolled_back)
        leaves that release for the previous one.
    type: str
    choices: [current, staged, rolled_back]
    default: current
  prefix:
    description:
      - Where releases live.
    type: path
    default: /opt/spur
  bin_dir:
    description:
      - Where the command links (C(spurctld), C(sbatch), ...) go. Defaults to C(PREFIX/bin).
    type: path
  python:
    description:
      - The Python the release's venv is made from. Defaults to the base interpreter of the one running the module.
    type: path
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - Check mode reads C(release.json) and the prefix's links; it does not verify the release's checksums, which
        the real run does before changing anything.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
    details: The diff shows the C(current) and C(previous) links before and after.
requirements:
  - Python 3.11 or later on the managed host, of the version the release was built for.
notes:
  - A release directory that fails its checksums is refused before anything on the host changes.
seealso:
  - module: spur.cluster.spur_preflight
"""

EXAMPLES = r"""
- name: Install the release and make it current
  spur.cluster.spur_release:
    src: /var/cache/spur/release-1.2.0
    prefix: /opt/spur
    bin_dir: /usr/local/bin
  register: __spur_release

- name: Restart the controller when the build changed
  ansible.builtin.systemd_service:
    name: spurctld
    state: restarted
  when: __spur_release.changed

- name: Roll back from that release
  spur.cluster.spur_release:
    src: /var/cache/spur/release-1.2.0
    state: rolled_back
"""

RETURN = r"""
release_id:
  description: The release's id, C(<version>-<build>).
  returned: always
  type: str
  sample: 1.2.0-3f2a9c81d0e4
version:
  description: The release's version.
  returned: when O(src) is given
  type: str
  sample: 1.2.0
build:
  description: The release's build (content hash), what the daemons report once restarted.
  returned: when O(src) is given
  type: str
  sample: 3f2a9c81d0e4
max_wal_level:
  description: The highest WAL level the release's controllers read (for M(spur.cluster.spur_preflight)).
  returned: when O(src) is given
  type: int
  sample: 2
prefix:
  description: The prefix.
  returned: always
  type: str
current:
  description: The release C(PREFIX/current) points at afterwards (as predicted in check mode).
  returned: always
  type: str
previous:
  description: The release C(PREFIX/previous) points at afterwards.
  returned: always
  type: str
installed:
  description: The complete releases under C(PREFIX/releases).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError
from ansible_collections.spur.cluster.plugins.module_utils.spur_release import ReleaseInstall


def argument_spec() -> dict:
    return dict(
        src=dict(type="path"),
        release=dict(type="str"),
        state=dict(type="str", choices=["current", "staged", "rolled_back"], default="current"),
        prefix=dict(type="path", default="/opt/spur"),
        bin_dir=dict(type="path"),
        python=dict(type="path"),
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("state", "current", ("src",)), ("state", "staged", ("src",))],
        required_one_of=[("src", "release")],
        mutually_exclusive=[("src", "release")],
    )
    try:
        result = ReleaseInstall(module.params, check_mode=module.check_mode, diff=module._diff).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
