"""Who may do what. Every RPC names its caller from the spur-auth credential; writes check the rules:

- reading (squeue, sinfo, scontrol show, sacct): any authenticated user;
- submitting: any user, as themselves (an administrator may submit for others);
- cancelling, holding, releasing a job: its owner or an administrator;
- draining, resuming, updating nodes, raising the WAL level: administrators only;
- agent traffic (register, heartbeat, job completion): administrators only (agents run as root).
Administrators are root and the users and @groups in [auth] admins.
"""

from __future__ import annotations

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

    def require_owner_or_admin(self, who: Identity, owner: str, owner_uid: int, action: str) -> None:
        if who.uid == owner_uid or who.user == owner or self.is_admin(who):
            return
        raise errors.PermissionDenied(f"user {who.user} (uid {who.uid}) may not {action}: it belongs to {owner}")

    def submit_as(self, who: Identity, spec: dict) -> None:
        """A job runs as its submitter; fill in who that is, and refuse a claim to be someone else."""
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
