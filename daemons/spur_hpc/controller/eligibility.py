"""May a pending job start at all, whatever the free resources: the scheduler's first question.

Pure over the replicated state plus the leader's clock (`now`, epoch seconds). The answer is a Slurm
pending reason when the job must wait, None when it may start as soon as nodes fit.
"""

from __future__ import annotations

from typing import Any

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState


def waiting_reason(s: ClusterState, job: dict[str, Any], now: float) -> str | None:
    if job.get("held"):
        return job.get("reason") or "JobHeldAdmin"
    return None
