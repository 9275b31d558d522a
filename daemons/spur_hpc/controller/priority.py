"""Slurm's priority/multifactor: a pending job's priority as the weighted sum of its factors, less its nice.

Pure: reads the replicated state (under its lock) and the [scheduler] priority_* settings, never writes. The leader
computes a new job's priority at submit (carried in its job_submit record) and every priority_calc_period
proposes one job_priorities record with the pending jobs whose priority changed, so every member orders the queue
alike (state.py applies both; scheduler.order_key orders by them).

    priority = age * w_age + fairshare * w_fairshare + job_size * w_job_size + partition * w_partition
               + qos * w_qos + assoc * w_assoc - nice            (at least 1; 0 is a held job's)

each factor in [0, 1] (Slurm 22.05's _get_priority_internal): age = min(1, eligible for / priority_max_age);
fairshare = the Fair Tree factor of the job's association (fairshare.py); job_size = (the job's nodes over the
cluster's + its CPUs over the cluster's) / 2, 1 minus that with priority_favor_small; partition = its
priority_job_factor over the highest of any partition; qos = its QOS priority over the highest QOS priority;
assoc = its association's priority (the nearest set up the tree) over the highest association priority.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spur_hpc.conf import SCHEMA
from spur_hpc.controller import associations, fairshare, placement
from spur_hpc.model import PENDING, parse_time_limit

FACTORS = ("age", "fairshare", "job_size", "partition", "qos", "assoc")
MAX_PRIORITY = 0xFFFFFFFF  # Slurm's priority is 32 bits


@dataclass(frozen=True)
class Settings:
    """[scheduler]'s priority keys, converted once."""

    multifactor: bool
    weights: dict[str, int]
    max_age_secs: int
    half_life_secs: int
    calc_period_secs: int
    favor_small: bool


def settings(conf: Any) -> Settings:
    """From the [scheduler] section (a test's stand-in config without one gets the keys' defaults)."""
    sch = getattr(conf, "scheduler", None)

    def value(name: str) -> Any:
        return getattr(sch, name, SCHEMA["scheduler"][name].default)

    return Settings(
        multifactor=value("priority_type") == "multifactor",
        weights={name: int(value(f"priority_weight_{name}")) for name in FACTORS},
        max_age_secs=parse_time_limit(value("priority_max_age"), "priority_max_age"),
        half_life_secs=parse_time_limit(value("priority_decay_half_life"), "priority_decay_half_life"),
        calc_period_secs=parse_time_limit(value("priority_calc_period"), "priority_calc_period"),
        favor_small=bool(value("priority_favor_small")),
    )


class Context:
    """What every job's factors share, worked out once per calculation: the fair-share tree, the cluster's size,
    the highest partition, QOS and association priorities."""

    def __init__(self, s: Any, now: float, parts: Any, conf: Settings) -> None:
        self.now, self.conf = now, conf
        store = s.assoc
        self.store = store
        self.shares = fairshare.shares(store, now) if store and conf.weights["fairshare"] else {}
        nodes = [n for n in s.nodes.values() if n.get("registered")]
        self.cluster_nodes = max(1, len(nodes))
        self.cluster_cpus = max(1, sum(int(n.get("cpus") or 0) for n in nodes))
        listing = parts.listing(s.nodes) if parts is not None else []
        self.part_factor = {p.name: max(0, int(p.priority_job_factor)) for p in listing}
        self.max_part = max(self.part_factor.values(), default=0)
        qos = store["qos"] if store else {}
        self.qos_priority = {name: max(0, int(row.get("priority") or 0)) for name, row in qos.items()}
        self.max_qos = max(self.qos_priority.values(), default=0)
        rows = store["assocs"].values() if store else ()
        self.max_assoc = max((max(0, int(r.get("priority") or 0)) for r in rows), default=0)
        # (user, account, partition, qos) -> (fairshare, qos, assoc) factors: a queue of 100,000 jobs has few
        self.by_assoc: dict[tuple[str, str, str, str], tuple[float, float, float]] = {}

    def assoc_factors(self, spec: dict[str, Any]) -> tuple[float, float, float]:
        """The fair-share, QOS and association factors of a job's association and QOS (worked out once each)."""
        memo_key = (spec.get("user", ""), spec.get("account", ""), spec.get("partition", ""), spec.get("qos", ""))
        found = self.by_assoc.get(memo_key)
        if found is None:
            key = job_assoc_key(self.store, spec)
            fs = self.shares[key]["fairshare"] if key in self.shares else 0.0
            qos_name = job_qos(self.store, spec, key)
            qos = self.qos_priority.get(qos_name, 0) / self.max_qos if self.max_qos else 0.0
            assoc = 0.0
            if key is not None and self.max_assoc:
                own = associations.effective(self.store, key, "priority")
                assoc = max(0, int(own)) / self.max_assoc if own != associations.NO_LIMIT else 0.0
            found = self.by_assoc[memo_key] = (fs, qos, assoc)
        return found


def job_assoc_key(store: dict[str, Any] | None, spec: dict[str, Any]) -> str | None:
    """The association a job runs under (its account, else the user's default one), or None."""
    if not store:
        return None
    user = spec.get("user", "")
    account = spec.get("account") or store["users"].get(user, {}).get("default_account", "")
    if not account:
        return None
    return associations.user_assoc_key(store, user, account, spec.get("partition") or "")


def job_qos(store: dict[str, Any] | None, spec: dict[str, Any], key: str | None) -> str:
    if spec.get("qos"):
        return spec["qos"]
    if store and key:
        return associations.default_qos(store, key)
    return associations.DEFAULT_QOS if store else ""


def factors(job: dict[str, Any], ctx: Context) -> dict[str, float]:
    """The job's six factors, each in [0, 1]."""
    spec, conf = job["spec"], ctx.conf
    eligible = float(job.get("eligible_time") or job.get("submit_time") or 0.0)
    waited = max(0.0, ctx.now - eligible)
    age = 1.0 if conf.max_age_secs <= 0 else min(1.0, waited / conf.max_age_secs)
    fs, qos, assoc = ctx.assoc_factors(spec)
    nodes = placement.node_count(spec)
    cpus = max(1, int(spec.get("tasks") or 1)) * max(1, int(spec.get("cpus_per_task") or 1))
    size = min(1.0, (nodes / ctx.cluster_nodes + cpus / ctx.cluster_cpus) / 2)
    if conf.favor_small:
        size = 1.0 - size
    part = placement.job_partition(spec)
    partition = ctx.part_factor.get(part, 1) / ctx.max_part if ctx.max_part else 0.0
    return {"age": age, "fairshare": fs, "job_size": size, "partition": partition, "qos": qos, "assoc": assoc}


def combine(values: dict[str, float], weights: dict[str, int], nice: int) -> int:
    """Slurm's sum: each factor times its weight, less nice, truncated; at least 1, at most 32 bits."""
    total = sum(values[name] * weights[name] for name in FACTORS) - nice
    return int(min(MAX_PRIORITY, max(1.0, total)))


def job_priority(job: dict[str, Any], ctx: Context) -> int:
    return combine(factors(job, ctx), ctx.conf.weights, int(job["spec"].get("nice") or 0))


def new_job_priority(s: Any, spec: dict[str, Any], now: float, parts: Any, conf: Settings) -> int:
    """A job about to be submitted: its first priority (eligible from its begin time, or now)."""
    eligible = max(now, float(spec.get("begin_time") or 0.0))
    return job_priority({"spec": spec, "eligible_time": eligible, "submit_time": now}, Context(s, now, parts, conf))


def changed_priorities(s: Any, now: float, parts: Any, conf: Settings) -> list[list[int]]:
    """[[job id, priority], ...] of the pending, unheld jobs whose multifactor priority differs from the one
    they have (the leader's periodic job_priorities record), by job id."""
    return changes(*snapshot(s, now, parts, conf))


def snapshot(s: Any, now: float, parts: Any, conf: Settings) -> tuple[list[dict[str, Any]], Context]:
    """What changes() needs, taken under the state lock: the pending, unheld jobs (the records themselves, read
    afterwards without the lock: a job updated meanwhile gets its priority at the next period) and the Context."""
    pending = [job for _job_id, job in sorted(s.jobs.items()) if job["state"] == PENDING and not job.get("held")]
    return pending, Context(s, now, parts, conf)


def changes(pending: list[dict[str, Any]], ctx: Context) -> list[list[int]]:
    out = []
    for job in pending:
        value = job_priority(job, ctx)
        if value != job.get("priority"):
            out.append([job["job_id"], value])
    return out
