"""Who may do what, and who sees what. Every RPC names its caller from the spur-auth credential; the rules:

- reading (squeue, sinfo, scontrol show, sacct, sprio, sshare): any authenticated user, narrowed by
  [auth] private_data as Slurm's PrivateData: under "jobs" a user sees only their own jobs (and those of the
  accounts they coordinate), under "usage" only their own associations; operators and administrators see all;
- a job's script and environment: its owner, operators and administrators, whatever private_data says;
- submitting: any user, as themselves and under one of their own groups (an administrator may submit for others);
- cancelling, holding, releasing, requeueing, updating a job: its owner, a coordinator of its account, an
  operator or an administrator;
- draining, resuming, updating nodes, suspending jobs: operators and administrators;
- changing the association store (sacctmgr): operators, administrators to make someone an Administrator;
- raising the WAL level: root and [auth] admins;
- agent traffic (register, heartbeat, job completion): root and [auth] admins only (agents run as root).
Levels are sacctmgr's AdminLevel (None, Operator, Administrator), kept in the association store. root, the uid
the daemons run as (Slurm's SlurmUser) and the users and @groups in [auth] admins are Administrators whatever
the store says, so a cluster without the store (WAL level below 5) still has its administrators.
"""

from __future__ import annotations

import grp
import os
import pwd
from typing import Any

from spur_hpc.auth import METADATA_KEY, AuthError, Identity, Verifier, is_admin
from spur_hpc.conf import Config
from spur_hpc.controller import associations, errors

OPERATOR = "Operator"
ADMINISTRATOR = "Administrator"
# sacctmgr's value for each level, for the fix a refusal names
_SACCTMGR_WORD = {OPERATOR: "operator", ADMINISTRATOR: "admin"}


class Authorizer:
    def __init__(self, conf: Config) -> None:
        try:
            self.verifier = Verifier(conf.auth.type, conf.auth.munge_socket)
        except AuthError as exc:
            raise errors.Unavailable(f"[auth] type = {conf.auth.type}: {exc}") from None
        self.admins = tuple(conf.auth.admins)
        self.daemon_uid = os.geteuid()  # Slurm's SlurmUser: the daemons' own uid is an administrator
        self.private_data = frozenset(conf.auth.private_data)

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

    # ------------------------------------------------------------ levels

    def is_admin(self, who: Identity) -> bool:
        """root, the daemons' uid and [auth] admins: administrators by configuration (the store cannot demote them)."""
        return who.uid == self.daemon_uid or is_admin(who, self.admins)

    def require_admin(self, who: Identity, action: str) -> None:
        """For what only the cluster's own hosts do (agent traffic, controllers probing each other)."""
        if not self.is_admin(who):
            raise errors.PermissionDenied(
                f"user {who.user} (uid {who.uid}) may not {action}: only administrators may ([auth] admins)"
            )

    def level(self, who: Identity, store: dict[str, Any] | None) -> str:
        """The caller's AdminLevel: Administrator by configuration, else what sacctmgr set in the store."""
        if self.is_admin(who):
            return ADMINISTRATOR
        return associations.admin_level(store, who.user)

    def at_least(self, who: Identity, wanted: str, store: dict[str, Any] | None) -> bool:
        return associations.at_least(self.level(who, store), wanted)

    def require_level(self, who: Identity, wanted: str, action: str, store: dict[str, Any] | None) -> None:
        """PERMISSION_DENIED unless the caller is at least `wanted` (Operator or Administrator), naming the fix."""
        if not self.at_least(who, wanted, store):
            raise errors.PermissionDenied(f"user {who.user} (uid {who.uid}) may not {action}: {needs(who, wanted)}")

    def acts_on_job(self, who: Identity, spec: dict[str, Any], store: dict[str, Any] | None) -> bool:
        """Its owner, an operator or a coordinator of its account (Slurm's job_signal, job_hold, update_job...)."""
        if who.uid == spec.get("uid", -1) or who.user == spec.get("user") or self.at_least(who, OPERATOR, store):
            return True
        return bool(spec.get("account")) and spec["account"] in coordinated_accounts(store, who.user)

    def require_job_actor(self, who: Identity, spec: dict[str, Any], action: str, store: dict[str, Any] | None) -> None:
        if self.acts_on_job(who, spec, store):
            return
        owner = spec.get("user", "")
        raise errors.PermissionDenied(
            f"user {who.user} (uid {who.uid}) may not {action}: it belongs to {owner}; {needs(who, OPERATOR)}"
        )

    # ------------------------------------------------------------ visibility ([auth] private_data)

    def private(self, category: str) -> bool:
        return category in self.private_data

    def job_filter(self, who: Identity, store: dict[str, Any] | None):
        """None when the caller sees every job, else a test of one job's spec (Slurm's _hide_job: under
        private_data "jobs" a user sees their own jobs and those of the accounts they coordinate)."""
        if "jobs" not in self.private_data or self.at_least(who, OPERATOR, store):
            return None
        coordinated = coordinated_accounts(store, who.user)

        def visible(spec: dict[str, Any]) -> bool:
            return spec.get("uid", -1) == who.uid or spec.get("user") == who.user or spec.get("account") in coordinated

        return visible

    def assoc_filter(self, who: Identity, store: dict[str, Any] | None):
        """None when the caller sees every association, else a test of one association row (Slurm's
        assoc_mgr_get_shares under PrivateData=usage: the caller's own, and those of accounts they coordinate)."""
        if "usage" not in self.private_data or self.at_least(who, OPERATOR, store):
            return None
        coordinated = coordinated_accounts(store, who.user)

        def visible(row: dict[str, Any]) -> bool:
            return (bool(row.get("user")) and row.get("user") == who.user) or row.get("account") in coordinated

        return visible

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


def needs(who: Identity, wanted: str) -> str:
    """What a refused caller lacks, and the two ways to give it to them."""
    return (
        f"needs AdminLevel {wanted} (sacctmgr modify user {who.user} set adminlevel={_SACCTMGR_WORD[wanted]}) "
        "or [auth] admins"
    )


def coordinated_accounts(store: dict[str, Any] | None, user: str) -> frozenset[str]:
    """The accounts `user` coordinates: those naming them in coordinators, and every account below those
    (sacctmgr add coordinator makes a coordinator of the sub-accounts too)."""
    if not store:
        return frozenset()
    accounts = store["accounts"]
    return frozenset(
        name
        for name in accounts
        if any(user in (accounts[a].get("coordinators") or ()) for a in associations.account_chain(store, name))
    )
