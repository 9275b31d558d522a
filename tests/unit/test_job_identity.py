"""A job's group is one of its user's groups on the node, whatever gid the request names (issue 16: a user ran a
job as gid 42 (shadow) and read /etc/shadow)."""

from __future__ import annotations

import grp
import pwd

import pytest

from prereqs import needs_root
from spur_hpc.auth import Identity
from spur_hpc.conf import Config
from spur_hpc.controller import errors
from spur_hpc.controller.authz import Authorizer
from spur_hpc.stepd.jobspec import InvalidJob, resolve_identity

NOBODY = pwd.getpwnam("nobody")
SHADOW_GID = grp.getgrnam("shadow").gr_gid


def test_the_agent_refuses_a_group_the_user_is_not_a_member_of():
    with pytest.raises(InvalidJob, match=r"not a member of group shadow \(gid 42\)"):
        resolve_identity({"user": "nobody", "uid": NOBODY.pw_uid, "gid": SHADOW_GID})


def test_the_agent_accepts_the_users_own_groups():
    ident = resolve_identity({"user": "nobody", "uid": NOBODY.pw_uid, "gid": NOBODY.pw_gid})
    assert ident.gid == NOBODY.pw_gid and SHADOW_GID not in ident.groups
    assert resolve_identity({"user": "nobody", "uid": NOBODY.pw_uid}).gid == NOBODY.pw_gid


def test_the_controller_refuses_a_gid_the_credential_does_not_vouch_for():
    authz = Authorizer(Config())
    nobody = Identity(NOBODY.pw_uid, NOBODY.pw_gid, "nobody", verified=True)
    spec = {"user": "nobody", "uid": NOBODY.pw_uid, "gid": SHADOW_GID}
    with pytest.raises(errors.PermissionDenied, match="may not submit a job with group shadow"):
        authz.submit_as(nobody, spec)
    own = {"user": "nobody", "uid": NOBODY.pw_uid, "gid": 0}
    authz.submit_as(nobody, own)
    assert own["gid"] == NOBODY.pw_gid, "a job without a gid runs under the credential's gid"


@needs_root()  # root's groups differ elsewhere
def test_an_administrator_may_still_submit_for_another_user():
    authz = Authorizer(Config())
    root = Identity(0, 0, "root", verified=True)
    spec = {"user": "nobody", "uid": NOBODY.pw_uid, "gid": NOBODY.pw_gid}
    authz.submit_as(root, spec)
    assert spec["gid"] == NOBODY.pw_gid
