"""Domain errors of the controller. The gRPC layer maps each to one status code, once."""

from __future__ import annotations

from spur_hpc.model import SLURM_ERROR_METADATA_KEY  # noqa: F401 (the gRPC layer reads it from here)


class ControllerError(Exception):
    """Base: the message is one line a user can act on."""


class NotFound(ControllerError):
    pass


class InvalidArgument(ControllerError):
    pass


class SlurmRefusal(InvalidArgument):
    """A refusal Slurm words with one of its error texts (slurm_errno.c), such as "Invalid partition name
    specified": the gRPC layer sends `slurm_error` in the trailing metadata (SLURM_ERROR_METADATA_KEY) so that
    sbatch prints Slurm's lines; the message stays the one line that names what is wrong."""

    def __init__(self, message: str, slurm_error: str) -> None:
        super().__init__(message)
        self.slurm_error = slurm_error


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
