"""Who may do what. Every RPC names its caller from the spur-auth credential; writes check the rules:

- reading (squeue, sinfo, scontrol show, sacct): any authenticated user;
- submitting: any user, as themselves and under one of their own groups (an administrator may submit for others);
- cancelling, holding, releasing a job: its owner or an administrator;
- draining, resuming, updating nodes, raising the WAL level: administrators only;
- agent traffic (register, heartbeat, job completion): administrators only (agents run as root).
Administrators are root and the users and @groups in [auth] admins.
"""

from __future__ import annotations

import grp
import os
import pwd

from spur_hpc.auth import METADATA_KEY, AuthError, Identity, Verifier, is_admin
from spur_hpc.conf import Config
from spur_hpc.controller import errors


class Authorizer:
    def __init__(self, conf: Config) -> None:
        try:
            self.verifier = Verifier(conf.auth.type, conf.auth.munge_socket)
        except AuthError as exc:
            raise errors.Unavailable(f"[auth] type = {conf.auth.type}: {exc}") from None
        self.admins = tuple(conf.auth.admins)

    def caller(self, context) -> Identity:
        credential = None
        for key, value in context.invocation_metadata() or ():
            if key == METADATA_KEY:
                credential = value
                break
        try:
            return self.verifier.identify(credential)
        except AuthError as exc:
            raise errors.Unauthenticated(str(exc)) from None

    def is_admin(self, who: Identity) -> bool:
        return is_admin(who, self.admins)

    def require_admin(self, who: Identity, action: str) -> None:
        if not self.is_admin(who):
            raise errors.PermissionDenied(
                f"user {who.user} (uid {who.uid}) may not {action}: only administrators may ([auth] admins)"
            )

    def owns_or_admin(self, who: Identity, owner: str, owner_uid: int) -> bool:
        return who.uid == owner_uid or who.user == owner or self.is_admin(who)

    def require_owner_or_admin(self, who: Identity, owner: str, owner_uid: int, action: str) -> None:
        if self.owns_or_admin(who, owner, owner_uid):
            return
        raise errors.PermissionDenied(f"user {who.user} (uid {who.uid}) may not {action}: it belongs to {owner}")

    def submit_as(self, who: Identity, spec: dict) -> None:
        """A job runs as its submitter; fill in who that is, and refuse a claim to be someone else.

        The uid and gid come from the credential (MUNGE vouches for both). A job may name another group only
        when this host's group database makes the caller a member of it: the request's own gid is never trusted.
        """
        if not spec.get("user") and not spec.get("uid"):
            spec.update(user=who.user, uid=who.uid, gid=who.gid)
            return
        if self.is_admin(who):
            return
        if spec.get("uid") != who.uid or spec.get("user") != who.user:
            raise errors.PermissionDenied(
                f"user {who.user} (uid {who.uid}) may not submit a job as {spec.get('user')} "
                f"(uid {spec.get('uid')}); submit as yourself"
            )
        gid = spec.get("gid") or who.gid
        if gid not in member_gids(who):
            raise errors.PermissionDenied(
                f"user {who.user} (uid {who.uid}) may not submit a job with group {group_name(gid)} (gid {gid}): "
                "not one of the user's groups; submit with your own group (sg/newgrp, or leave the gid out)"
            )
        spec["gid"] = gid


def member_gids(who: Identity) -> set[int]:
    """The gids a caller may run under: the credential's gid and the user's groups in this host's group database."""
    gids = {who.gid}
    try:
        primary = pwd.getpwuid(who.uid)
    except KeyError:
        return gids  # unknown here: only the vouched-for gid
    gids.update(os.getgrouplist(primary.pw_name, primary.pw_gid))
    return gids


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
