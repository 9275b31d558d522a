"""WAL records: the self-describing entries of the replicated log.

A record is a plain dict {"op": name, "level": n, ...fields} with primitive values only. Every op has the
WAL level that introduced it. The cluster has one enabled level (replicated); the leader never proposes
an op above it, and a member that meets an op it does not know, or a level above what this code reads,
stops applying (see state.ClusterState.apply) instead of guessing.
"""

from __future__ import annotations

from typing import Any

# The highest WAL level this code can read. Raise it together with the first op of a new level.
MAX_WAL_LEVEL = 5

# op name -> the level that introduced it. Never renumber: a level is a promise to older members.
OP_LEVELS: dict[str, int] = {
    "cluster_init": 1,
    "member_announce": 1,
    "set_wal_level": 1,
    "node_register": 1,
    "node_deregister": 1,
    "node_lost": 1,
    "node_drain": 1,
    "node_resume": 1,
    "node_down": 1,
    "job_submit": 1,
    "job_start": 1,
    "job_requeue": 1,
    "job_end": 1,
    "job_cancel": 1,
    "jobs_purge": 1,
    # level 2: holding a pending job back from the scheduler (scontrol hold / release)
    "job_hold": 2,
    "job_release": 2,
    # level 3: job steps (srun inside an allocation; docs/controller.md "Steps")
    "step_create": 3,
    "step_end": 3,
    # level 3: arrays, dependencies, requeue and update (a level-2 member would apply them as something else,
    # or not at all). At level 3 the state machine also reads a job_submit's array, dependency, hold and begin
    # time, and puts a requeue-able job that a node failure ends back in the queue.
    "job_array_split": 3,  # the leader starts an array's next task (a record of its own, or the array's last)
    "job_array_cancel": 3,  # scancel N / N_3 / N_[1-3]: tasks of an array
    "job_update": 3,  # scontrol update JobId=...
    "job_requeue_user": 3,  # scontrol requeue / requeuehold
    "job_pending_end": 3,  # the leader ends a pending job: past its --deadline, or a dependency never satisfied
    # level 4: a node whose agent is about to restart takes no new job or step until it registers again or the
    # hold ends (the hold's end time is in the record; a level-3 member would start jobs on the node)
    "node_dispatch_hold": 4,
    # level 4: scontrol suspend / resume (a level-3 member would know no suspended job, and end it at its time
    # limit as if it had run all along)
    "job_suspend": 4,
    "job_resume": 4,
    # level 5: accounts, users, associations and QOS (controller/associations.py; a level-4 member keeps no
    # store, and would neither enforce limits nor charge usage), multifactor priorities the leader recalculates,
    # and preemption (a level-4 member would see a preempted job end or requeue for no reason it knows)
    "assoc_apply": 5,
    "job_priorities": 5,
    "job_preempt": 5,
    # level 5: controllers added and removed online (controller/membership.py): learn, promote, remove; a level-4
    # member would keep replicating to a removed controller and never to an added one
    "member_change": 5,
}


class WalLevelError(Exception):
    """An op above the cluster's enabled WAL level was requested."""


class UnknownOpError(Exception):
    """A record names an op this code does not know."""


def make_record(op: str, **fields: Any) -> dict[str, Any]:
    if op not in OP_LEVELS:
        raise UnknownOpError(f"unknown WAL op {op!r}")
    if "op" in fields or "level" in fields:
        raise ValueError(f"{op}: 'op' and 'level' describe the record itself and cannot be fields")
    record = {"op": op, "level": OP_LEVELS[op]}
    record.update(fields)
    return record


def check_level(record: dict[str, Any], enabled_level: int) -> None:
    """Refuse (on the proposer) a record the cluster may not be able to read yet."""
    if record["level"] > enabled_level:
        raise WalLevelError(
            f"operation {record['op']} needs WAL level {record['level']} but the cluster runs level "
            f"{enabled_level}; upgrade every controller, then raise the level (spur cluster wal-level "
            f"{record['level']} or the rolling upgrade's last step)"
        )


def readable(record: Any) -> str | None:
    """None when this code can apply the record; otherwise why not (one line)."""
    if not isinstance(record, dict) or "op" not in record or "level" not in record:
        return f"malformed record {record!r:.80}"
    op, level = record["op"], record["level"]
    if not isinstance(level, int) or level > MAX_WAL_LEVEL:
        return f"op {op!r} has WAL level {level}, this release reads up to level {MAX_WAL_LEVEL}"
    if op not in OP_LEVELS:
        return f"unknown op {op!r} (level {level}); a newer release wrote it"
    return None
