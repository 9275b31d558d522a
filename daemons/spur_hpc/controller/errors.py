"""Domain errors of the controller. The gRPC layer maps each to one status code, once."""

from __future__ import annotations


class ControllerError(Exception):
    """Base: the message is one line a user can act on."""


class NotFound(ControllerError):
    pass


class InvalidArgument(ControllerError):
    pass


class Conflict(ControllerError):
    """The request is valid but the current state refuses it (FAILED_PRECONDITION)."""


class AlreadyExists(ControllerError):
    """The name is taken by someone else (ALREADY_EXISTS)."""


class PermissionDenied(ControllerError):
    pass


class Unauthenticated(ControllerError):
    """No credential, or one that does not check out."""


class Unavailable(ControllerError):
    """No leader, a stalled member, or a write whose outcome is unknown: retry (with the same key)."""


class NotLeader(Unavailable):
    """Agent traffic must reach the leader; leader is its gRPC address when known."""

    def __init__(self, message: str, leader: str | None) -> None:
        super().__init__(message)
        self.leader = leader
