"""qos_priority preemption: which running jobs a pending job that does not fit may stop, and how.

Pure, read-only over the replicated state (the leader runs it under the state lock after a plan, for each job
that blocked its partition) and over the association store, its QOS rows. The rules ([scheduler] preempt_type =
"qos_priority"; docs/controller.md "Preemption"):

- a pending job J may preempt a running job V only when J's QOS lists V's QOS in `preempt` and J's QOS priority
  is strictly higher (fair-share, age and --nice play no part);
- V's action is its QOS's preempt_mode when set (`off` protects it, even from a partition that says cancel),
  else the most aggressive of its partitions' preempt_mode (requeue > cancel > off);
- only what J needs is preempted: the fewest, least valuable victims that let placement fit J.

The leader writes one job_preempt record per victim (state.py applies it); a cancel ends V PREEMPTED once its
processes are gone, a requeue puts it back PENDING at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spur_hpc.controller import associations, placement
from spur_hpc.model import RUNNING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from spur_hpc.controller.state import ClusterState

NONE, QOS_PRIORITY = "none", "qos_priority"
PREEMPT_TYPES = (NONE, QOS_PRIORITY)
OFF, CANCEL, REQUEUE = "off", "cancel", "requeue"
PREEMPT_MODES = (OFF, CANCEL, REQUEUE)
# How aggressive a mode is: a job in several partitions takes the most aggressive of theirs.
_AGGRESSION = {OFF: 0, CANCEL: 1, REQUEUE: 2}


@dataclass(frozen=True)
class Victim:
    job_id: int
    attempt: int
    mode: str  # cancel | requeue
    nodes: tuple[str, ...]


def preempt_levels(store: dict[str, Any]) -> dict[str, int]:
    """Each QOS's rank in the preemption order (QOS of rank 0 left out): one more than the highest rank among the
    QOS it may preempt (listed, of a strictly lower priority), 0 when it may preempt none. A job may preempt only
    jobs of a lower rank, so a queue ordered by rank first plans every preemptor before the jobs it could preempt,
    as Slurm's queue sort does (sort_job_queue2 puts a job that may preempt another before it). Worked out once
    per QOS table (an assoc_apply replaces the table)."""
    rows = store["qos"]
    if _LEVELS[0] is rows:
        return _LEVELS[1]
    levels: dict[str, int] = {}

    def level(name: str) -> int:  # the edges go to strictly lower priorities: no cycle, depth at most the QOS count
        if name not in levels:
            row = rows[name]
            below = [v for v in row.get("preempt") or () if v in rows and may_preempt(row, rows[v])]
            levels[name] = 1 + max(level(v) for v in below) if below else 0
        return levels[name]

    for name in sorted(rows, key=lambda n: int(rows[n].get("priority") or 0)):  # lowest first: shallow recursion
        level(name)
    found = {name: n for name, n in levels.items() if n}
    _LEVELS[:] = [rows, found]
    return found


_LEVELS: list[Any] = [None, {}]  # (the QOS table, its levels): the last one worked out


def job_qos(store: dict[str, Any], job: dict[str, Any]) -> dict[str, Any] | None:
    """The QOS row a job runs under (its --qos, else normal), None when the store has no such QOS."""
    return store["qos"].get(job["spec"].get("qos") or associations.DEFAULT_QOS)


def may_preempt(preemptor: dict[str, Any], victim: dict[str, Any]) -> bool:
    """J's QOS lists V's QOS in preempt and has a strictly higher priority."""
    return victim["name"] in (preemptor.get("preempt") or ()) and int(preemptor.get("priority") or 0) > int(
        victim.get("priority") or 0
    )


def victim_mode(qos: dict[str, Any], partition_modes: list[str]) -> str:
    """What preemption does to a job of this QOS in these partitions: the QOS's preempt_mode when set (a mode this
    engine does not carry out, such as Slurm's suspend, protects the job rather than doing something else), else
    the most aggressive of the partitions'."""
    own = (qos.get("preempt_mode") or "").lower()
    if own:
        return own if own in (CANCEL, REQUEUE) else OFF
    known = [m for m in partition_modes if m in _AGGRESSION] or [OFF]
    return max(known, key=_AGGRESSION.__getitem__)


def choose_victims(
    s: ClusterState,
    job: dict[str, Any],
    free: dict[str, dict[str, Any]],
    partition_mode: Callable[[str], str],
    ending: Collection[int] = (),
) -> list[Victim]:
    """The running jobs the pending `job` should preempt to fit now, least valuable first; [] when it may preempt
    none, or when even every job it may preempt would not make room. `free` is the planner's map
    (placement.free_resources) as the plan left it; `partition_mode` gives a partition's preempt_mode; `ending`
    are jobs already being preempted (they are neither chosen again nor counted as freed)."""
    store = s.assoc
    if store is None:
        return []
    mine = job_qos(store, job)
    if mine is None or not mine.get("preempt"):
        return []
    room = _Room(s, job, free)
    if room.fits():
        return []  # it fits as things are (the plan left it for another reason): nothing to preempt for
    partition = placement.job_partition(job["spec"])
    candidates: list[tuple[tuple, dict[str, Any], str]] = []
    seen: set[int] = set()
    modes: dict[tuple[str, str], str] = {}  # (QOS, partition) -> the action, worked out once
    for entry in free.values():
        if partition not in entry.get("partitions", (partition,)):
            continue
        for victim_id in entry["node"]["jobs"]:
            if victim_id in seen or victim_id in ending:
                continue
            seen.add(victim_id)
            victim = s.jobs.get(victim_id)
            if victim is None or victim["state"] != RUNNING or victim["cancel_requested"]:
                continue
            theirs = job_qos(store, victim)
            if theirs is None or not may_preempt(mine, theirs):
                continue
            their_partition = placement.job_partition(victim["spec"])
            mode = modes.get((theirs["name"], their_partition))
            if mode is None:
                mode = modes[theirs["name"], their_partition] = victim_mode(theirs, [partition_mode(their_partition)])
            if mode == OFF:
                continue
            # The least valuable first: the lower QOS priority, the lower job priority, the youngest run.
            rank = (int(theirs.get("priority") or 0), int(victim.get("priority") or 0), -victim["start_time"])
            candidates.append(((*rank, -victim_id), victim, mode))
    candidates.sort(key=lambda c: c[0])
    chosen: list[tuple[dict[str, Any], str]] = []
    for _rank, victim, mode in candidates:
        chosen.append((victim, mode))
        room.free(victim)
        if room.fits():
            break
    else:
        return []
    # Keep only what is needed: give back each victim, the most valuable first, that the job can do without.
    needed = []
    for victim, mode in reversed(chosen):
        room.unfree(victim)
        if room.fits():
            continue
        room.free(victim)
        needed.append((victim, mode))
    return [Victim(v["job_id"], v["attempt"], mode, tuple(v["nodes"])) for v, mode in reversed(needed)]


class _Room:
    """What the pending job would find with some running jobs gone: the planner's free map with what each of them
    held given back, kept per node as victims are added and dropped, and the set of nodes that would take one
    node's share of the job. Each change touches only the victim's own nodes, so choosing among thousands of
    running jobs on thousands of nodes stays linear."""

    def __init__(self, s: ClusterState, job: dict[str, Any], free: dict[str, dict[str, Any]]) -> None:
        self.base = free
        spec = job["spec"]
        self.want = placement.demand(spec)
        self.named, self.count = placement.named_nodes(spec), placement.node_count(spec)
        self.entries: dict[str, dict[str, Any]] = {}  # node -> its free entry with the victims' share given back
        self.gone: dict[str, set[int]] = {}  # node -> the victims freeing it
        self.fitting = {n for n, e in free.items() if placement.share(e["node"], e, self.want) is not None}

    def fits(self) -> bool:
        return all(n in self.fitting for n in self.named) and len(self.fitting) >= self.count

    def free(self, victim: dict[str, Any]) -> None:
        self._move(victim, 1)

    def unfree(self, victim: dict[str, Any]) -> None:
        self._move(victim, -1)

    def _move(self, victim: dict[str, Any], sign: int) -> None:
        per_node = (victim.get("alloc") or {}).get("per_node") or {}
        for name in victim["nodes"]:
            if name not in self.base or name not in per_node:
                continue
            entry = self.entries.get(name)
            if entry is None:
                entry = self.entries[name] = dict(self.base[name], gres=dict(self.base[name]["gres"]))
            gone = self.gone.setdefault(name, set())
            (gone.add if sign > 0 else gone.discard)(victim["job_id"])
            held = per_node[name]
            entry["cpus"] += sign * held["cpus"]
            entry["mem"] += sign * held["memory_mb"]
            for key, count in (held.get("gres") or {}).items():
                entry["gres"][key] = entry["gres"].get(key, 0) + sign * count
            node = entry["node"]
            # exclusive and idle follow from who is left on the node (a job of this plan's starts counts)
            entry["exclusive"] = self.base[name]["exclusive"] and node.get("exclusive_job") not in gone
            entry["idle"] = self.base[name]["idle"] or not [j for j in node["jobs"] if j not in gone]
            if placement.share(node, entry, self.want) is not None:
                self.fitting.add(name)
            else:
                self.fitting.discard(name)
