"""Association and QOS limits ([accounting] enforce = ["limits"]): why a pending job waits, why a submission is refused.

Pure over the replicated state (the association store, s.assoc, and the jobs), like eligibility.py: nothing is
written back. Slurm's meaning (its resource_limits page and acct_policy.c):

- The job's QOS is checked first, then its association chain from the user's association up to root. A limit the
  QOS sets hides the association's of the same kind (QOS GrpJobs hides every association's GrpJobs, QOS
  MaxJobsPerUser the association's MaxJobs, one TRES of QOS GrpTRES the same TRES of every GrpTRES...).
- Grp limits count the running jobs of an association's whole subtree (or of the QOS) and are checked at every
  level of the chain; Max limits (MaxJobs, MaxWall, MaxTRESPerJob, MaxSubmitJobs) are checked on the user's
  association only, with the value the nearest association sets (associations.effective).
- TRES are cpu (allocated CPUs), mem (MB), node and gres/NAME (gres/gpu counts every type of gpu).
- Submit limits (GrpSubmitJobs, MaxSubmitJobs, MaxSubmitJobsPerUser) count pending and running jobs (each task of
  an array) and refuse at submit. A job over MaxWall or MaxTRESPerJob pends with the limit's reason, unless its
  QOS has the flag DenyOnLimit: then it is refused at submit, Grp limits treated as Max ones (as Slurm does).

`memo` is the dict one pass over the queue shares (a plan, one squeue): the running jobs' usage is counted once
per pass (from the JobIndex's running set when the plan passes it, memo["running_ids"]), and each start the plan
decides is charged to it (charge()), so one plan never starts more than a limit allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spur_hpc import model
from spur_hpc.controller import associations, placement
from spur_hpc.controller.tracking import JobTracker
from spur_hpc.model import FINISHED_STATES, RUNNING, parse_array_ranges, per_node_cpus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from spur_hpc.controller.state import ClusterState

NO_LIMIT = associations.NO_LIMIT
# Slurm's error text (slurm_errno.c, ESLURM_ACCOUNTING_POLICY) that sbatch prints after "Batch job submission failed: ".
SLURM_ACCOUNTING_POLICY = "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
DENY_ON_LIMIT = "denyonlimit"

# Slurm's pending reasons (job_reason_string in slurm_protocol_defs.c), by limit and TRES.
_GRP_TRES = {
    "qos": {
        "cpu": "QOSGrpCpuLimit",
        "mem": "QOSGrpMemLimit",
        "node": "QOSGrpNodeLimit",
        "billing": "QOSGrpBilling",
        "gres": "QOSGrpGRES",
    },
    "assoc": {
        "cpu": "AssocGrpCpuLimit",
        "mem": "AssocGrpMemLimit",
        "node": "AssocGrpNodeLimit",
        "billing": "AssocGrpBilling",
        "gres": "AssocGrpGRES",
    },
}
_MAX_TRES_PER_JOB = {
    "qos": {
        "cpu": "QOSMaxCpuPerJobLimit",
        "mem": "QOSMaxMemoryPerJob",
        "node": "QOSMaxNodePerJobLimit",
        "billing": "QOSMaxBillingPerJob",
        "gres": "QOSMaxGRESPerJob",
    },
    "assoc": {
        "cpu": "AssocMaxCpuPerJobLimit",
        "mem": "AssocMaxMemPerJob",
        "node": "AssocMaxNodePerJobLimit",
        "billing": "AssocMaxBillingPerJob",
        "gres": "AssocMaxGRESPerJob",
    },
}
_QOS_MAX_TRES_PER_USER = {
    "cpu": "QOSMaxCpuPerUserLimit",
    "mem": "QOSMaxMemoryPerUser",
    "node": "QOSMaxNodePerUserLimit",
    "billing": "QOSMaxBillingPerUser",
    "gres": "QOSMaxGRESPerUser",
}
QOS_GRP_JOBS = model.REASON_QOS_GRP_JOBS
QOS_MAX_JOBS_PER_USER = model.REASON_QOS_MAX_JOBS_PER_USER
QOS_MAX_WALL = "QOSMaxWallDurationPerJobLimit"
ASSOC_GRP_JOBS = model.REASON_ASSOC_GRP_JOBS
ASSOC_MAX_JOBS = model.REASON_ASSOC_MAX_JOBS
ASSOC_MAX_WALL = "AssocMaxWallDurationPerJobLimit"
# The submit limits' reasons (what the refusal names; Slurm logs them, sbatch prints SLURM_ACCOUNTING_POLICY).
QOS_GRP_SUBMIT = "QOSGrpSubmitJobsLimit"
QOS_MAX_SUBMIT_PER_USER = "QOSMaxSubmitJobPerUserLimit"
ASSOC_GRP_SUBMIT = "AssocGrpSubmitJobsLimit"
ASSOC_MAX_SUBMIT = "AssocMaxSubmitJobLimit"
# Every pending reason waiting_reason gives: a job held back by one is eligible (Slurm's EligibleTime is set).
REASONS = frozenset(
    [r for table in (_GRP_TRES, _MAX_TRES_PER_JOB) for kind in table.values() for r in kind.values()]
    + list(_QOS_MAX_TRES_PER_USER.values())
    + [QOS_GRP_JOBS, QOS_MAX_JOBS_PER_USER, QOS_MAX_WALL, ASSOC_GRP_JOBS, ASSOC_MAX_JOBS, ASSOC_MAX_WALL]
)
# Slurm's TRES order (cpu, mem, node, billing, then each gres): the first limit a job is over is its reason.
_TRES_ORDER = {"cpu": 0, "mem": 1, "node": 2, "billing": 3}

_policy = {"enforced": False}


def configure(enforce: Iterable[str]) -> None:
    """Whether this controller enforces limits: [accounting] enforce holds limits (or safe, which implies it).
    One setting of the process, as Slurm's AccountingStorageEnforce is of slurmctld: the plan and every reader
    (squeue's reasons) must agree, so ControllerService sets it at start and on SIGHUP."""
    _policy["enforced"] = bool({"limits", "safe"} & set(enforce))


def enforced() -> bool:
    return _policy["enforced"]


# ------------------------------------------------------------------ what a job holds or asks for


def tres_kind(tres: str) -> str:
    return "gres" if tres.startswith("gres/") else tres


def _limited(limits: dict[str, int] | None) -> dict[str, int]:
    """The TRES of a limit map that are set and that Spur counts (cpu, mem, node, billing, gres/NAME)."""
    return {t: v for t, v in (limits or {}).items() if _set(v) and (t in _TRES_ORDER or t.startswith("gres/"))}


def _tres_rank(tres: str) -> tuple[int, str]:
    return _TRES_ORDER.get(tres, 4), tres


def _add_gres(out: dict[str, int], gres: dict[str, int], times: int) -> None:
    """gres keys as placement keeps them (gpu, gpu:a100) -> gres/gpu (every type) and gres/gpu:a100."""
    for key, count in gres.items():
        name = key.split(":", 1)[0]
        out[f"gres/{name}"] = out.get(f"gres/{name}", 0) + count * times
        if name != key:
            out[f"gres/{key}"] = out.get(f"gres/{key}", 0) + count * times


def requested_tres(spec: dict[str, Any]) -> dict[str, int]:
    """What a pending job asks for: cpu, mem (MB; 0 without --mem, as Spur holds none then), node, gres/NAME."""
    nodes = placement.node_count(spec)
    cpus = per_node_cpus(spec) * nodes
    mem_per_cpu = int(spec.get("mem_per_cpu_mb") or 0)
    out = {"cpu": cpus, "mem": mem_per_cpu * cpus if mem_per_cpu else int(spec.get("memory_mb") or 0) * nodes}
    out.update(node=nodes, billing=cpus)  # billing: the CPUs (no TRESBillingWeights), as scontrol's TRES= shows
    _add_gres(out, placement.gres_demand(spec), nodes)
    return out


def held_tres(job: dict[str, Any]) -> dict[str, int]:
    """What a running job holds (its alloc record: an exclusive job holds its nodes' every CPU)."""
    alloc = job.get("alloc") or {}
    per_node = alloc.get("per_node") or {}
    nodes = len(job.get("nodes") or ())
    if per_node:
        out = {
            "cpu": sum(h["cpus"] for h in per_node.values()),
            "mem": sum(h["memory_mb"] for h in per_node.values()),
            "node": nodes,
        }
    else:  # a record from before per_node: the same share on each node
        out = {"cpu": int(alloc.get("cpus") or 0) * nodes, "mem": int(alloc.get("memory_mb") or 0) * nodes}
        out["node"] = nodes
    out["billing"] = out["cpu"]
    _add_gres(out, placement.job_gres(job), 1)
    return out


# ------------------------------------------------------------------ which limits apply to a job


def job_scope(store: dict[str, Any], spec: dict[str, Any]) -> tuple[str | None, str]:
    """(the job's association key or None, its QOS name or ""): what the submit path resolved into the spec."""
    account = spec.get("account") or ""
    user, partition = spec.get("user", ""), spec.get("partition", "")
    key = associations.user_assoc_key(store, user, account, partition) if account else None
    qos = spec.get("qos") or ""
    return key, (qos if qos in store["qos"] else "")


def _row_scope(row: dict[str, Any]) -> tuple[str, str]:
    return "assoc", associations.assoc_key(row["account"], row["user"], row["partition"])


def _set(value: Any) -> bool:
    return value is not None and value != NO_LIMIT


def profile(store: dict[str, Any], key: str | None, qos_name: str) -> dict[str, Any]:
    """The limits a job of this association and QOS runs under, in the order Slurm checks them:
    checks: [(kind, scope, what, limit, reason)], kind "count" (running jobs of a scope), "tres" (running TRES of
    a scope), "job" (the job's own TRES, "wall" its time limit); scopes: ("qos", name), ("qos_user", name),
    ("assoc", key). submit: the same for the submit limits (pending + running jobs). deny: DenyOnLimit."""
    qos = store["qos"].get(qos_name) if qos_name else None
    pre: list[tuple] = []
    post: list[tuple] = []
    submit: list[tuple] = []
    qos_grp_tres, qos_job_tres = {}, {}
    if qos is not None:
        q = ("qos", qos_name)
        qu = ("qos_user", qos_name)
        if _set(qos.get("grp_jobs")):
            pre.append(("count", q, "jobs", qos["grp_jobs"], QOS_GRP_JOBS))
        if _set(qos.get("max_jobs_per_user")):
            pre.append(("count", qu, "jobs", qos["max_jobs_per_user"], QOS_MAX_JOBS_PER_USER))
        if _set(qos.get("max_wall_secs")):
            pre.append(("wall", None, "wall", qos["max_wall_secs"], QOS_MAX_WALL))
        qos_grp_tres = _limited(qos.get("grp_tres"))
        qos_job_tres = _limited(qos.get("max_tres_per_job"))
        for tres in sorted(qos_grp_tres, key=_tres_rank):
            post.append(("tres", q, tres, qos_grp_tres[tres], _GRP_TRES["qos"][tres_kind(tres)]))
        for tres in sorted(qos_job_tres, key=_tres_rank):
            post.append(("job", None, tres, qos_job_tres[tres], _MAX_TRES_PER_JOB["qos"][tres_kind(tres)]))
        user_tres = _limited(qos.get("max_tres_per_user"))
        for tres in sorted(user_tres, key=_tres_rank):
            post.append(("tres", qu, tres, user_tres[tres], _QOS_MAX_TRES_PER_USER[tres_kind(tres)]))
        if _set(qos.get("grp_submit_jobs")):
            submit.append(("count", q, "jobs", qos["grp_submit_jobs"], QOS_GRP_SUBMIT))
        if _set(qos.get("max_submit_jobs_per_user")):
            submit.append(("count", qu, "jobs", qos["max_submit_jobs_per_user"], QOS_MAX_SUBMIT_PER_USER))
    qos = qos or {}
    if key is not None:
        for level, row in enumerate(associations.assoc_chain(store, key)):
            scope = _row_scope(row)
            if not _set(qos.get("grp_jobs")) and _set(row.get("grp_jobs")):
                pre.append(("count", scope, "jobs", row["grp_jobs"], ASSOC_GRP_JOBS))
            grp_tres = _limited(row.get("grp_tres"))
            for tres in sorted(grp_tres, key=_tres_rank):
                if tres not in qos_grp_tres:
                    post.append(("tres", scope, tres, grp_tres[tres], _GRP_TRES["assoc"][tres_kind(tres)]))
            if not _set(qos.get("grp_submit_jobs")) and _set(row.get("grp_submit_jobs")):
                submit.append(("count", scope, "jobs", row["grp_submit_jobs"], ASSOC_GRP_SUBMIT))
            if level:
                continue  # the Max limits: the user's association's, inherited (associations.effective)
            max_jobs = associations.effective(store, key, "max_jobs")
            if not _set(qos.get("max_jobs_per_user")) and _set(max_jobs):
                pre.append(("count", scope, "jobs", max_jobs, ASSOC_MAX_JOBS))
            max_wall = associations.effective(store, key, "max_wall_secs")
            if not _set(qos.get("max_wall_secs")) and _set(max_wall):
                pre.append(("wall", None, "wall", max_wall, ASSOC_MAX_WALL))
            job_tres = _limited(associations.effective(store, key, "max_tres_per_job"))
            for tres in sorted(job_tres, key=_tres_rank):
                if tres not in qos_job_tres:
                    post.append(("job", None, tres, job_tres[tres], _MAX_TRES_PER_JOB["assoc"][tres_kind(tres)]))
            max_submit = associations.effective(store, key, "max_submit_jobs")
            if not _set(qos.get("max_submit_jobs_per_user")) and _set(max_submit):
                submit.append(("count", scope, "jobs", max_submit, ASSOC_MAX_SUBMIT))
    deny = any(str(f).lower() == DENY_ON_LIMIT for f in qos.get("flags") or ())
    return {"checks": pre + post, "submit": submit, "deny": deny}


def _profile_of(store: dict[str, Any], spec: dict[str, Any], memo: dict) -> tuple[dict[str, Any], str | None, str]:
    key, qos = job_scope(store, spec)
    cache = memo.setdefault("limit_profiles", {})
    found = cache.get((key, qos))
    if found is None:
        found = cache[(key, qos)] = profile(store, key, qos)
    return found, key, qos


def _job_facts(store: dict[str, Any], job: dict[str, Any], memo: dict) -> list:
    """[profile, association key, QOS, request or None] of a job, worked out once per pass (the plan asks twice:
    may it start, then charge its start)."""
    cache = memo.setdefault("limit_jobs", {})
    facts = cache.get(job["job_id"])
    if facts is None:
        facts = cache[job["job_id"]] = [*_profile_of(store, job["spec"], memo), None]
    return facts


def _request(facts: list, spec: dict[str, Any]) -> dict[str, int]:
    if facts[3] is None:
        facts[3] = requested_tres(spec)
    return facts[3]


def _scope_key(scope: tuple, spec: dict[str, Any]) -> tuple:
    """A scope's key in the usage tables: a QOS per user is (qos_user, qos, user)."""
    return (*scope, spec.get("user", "")) if scope[0] == "qos_user" else scope


def wall_over(spec: dict[str, Any], limit: int) -> bool:
    """A time limit over MaxWall; no time limit (0, Slurm's INFINITE) is over every MaxWall."""
    asked = int(spec.get("time_limit_secs") or 0)
    return asked == 0 or asked > limit


# ------------------------------------------------------------------ what runs now, counted once per pass


def _scopes(store: dict[str, Any], spec: dict[str, Any], memo: dict, scope: tuple | None = None) -> list[tuple]:
    """Every usage key a job of this spec counts in: its QOS, its QOS per user, each association of its chain.
    scope: its (association key, QOS) when known (job_scope)."""
    key, qos = scope or job_scope(store, spec)
    chains = memo.setdefault("limit_chains", {})
    chain = chains.get(key)
    if chain is None:
        chain = chains[key] = [_row_scope(r) for r in associations.assoc_chain(store, key)] if key else []
    out = list(chain)
    if qos:
        out += [("qos", qos), ("qos_user", qos, spec.get("user", ""))]
    return out


def _charge(usage: dict[tuple, dict[str, int]], scopes: list[tuple], tres: dict[str, int], jobs: int) -> None:
    for scope in scopes:
        used = usage.setdefault(scope, {})
        used["jobs"] = used.get("jobs", 0) + jobs
        for name, count in tres.items():
            used[name] = used.get(name, 0) + count


def _running_usage(s: ClusterState, memo: dict) -> dict[tuple, dict[str, int]]:
    usage = memo.get("limit_usage")
    if usage is None:
        usage = memo["limit_usage"] = {}
        ids = memo.get("running_ids")
        jobs = (s.jobs[j] for j in ids if j in s.jobs) if ids is not None else s.jobs.values()
        for job in jobs:
            if job["state"] == RUNNING:
                _charge(usage, _scopes(s.assoc, job["spec"], memo), held_tres(job), 1)
    return usage


def charge(s: ClusterState, job: dict[str, Any], memo: dict) -> None:
    """Count a start the plan just decided (placement.take's twin for limits), so the next job of the same plan sees
    it. A job under no limit at all is in no scope another job's limit counts (its chain and QOS set none)."""
    if not enforced() or s.assoc is None:
        return
    facts = _job_facts(s.assoc, job, memo)
    if facts[0]["checks"]:
        scopes = _scopes(s.assoc, job["spec"], memo, (facts[1], facts[2]))
        _charge(_running_usage(s, memo), scopes, _request(facts, job["spec"]), 1)


# ------------------------------------------------------------------ the answers


def waiting_reason(s: ClusterState, job: dict[str, Any], memo: dict | None = None) -> str | None:
    """The limit a pending job is over now (Slurm's reason), or None: eligibility.waiting_reason's last question."""
    if not enforced() or s.assoc is None:
        return None
    memo = {} if memo is None else memo
    spec = job["spec"]
    facts = _job_facts(s.assoc, job, memo)
    if not facts[0]["checks"]:
        return None
    for kind, scope, what, limit, reason in facts[0]["checks"]:
        if kind == "wall":
            if wall_over(spec, limit):
                return reason
            continue
        if kind == "count":
            if _running_usage(s, memo).get(_scope_key(scope, spec), {}).get("jobs", 0) + 1 > limit:
                return reason
            continue
        asked = _request(facts, spec).get(what, 0)  # worked out only for a TRES limit
        if kind == "job":
            if asked > limit:
                return reason
        elif asked and _running_usage(s, memo).get(_scope_key(scope, spec), {}).get(what, 0) + asked > limit:
            return reason  # (a job asking for none of a TRES is never held back by its limit)
    return None


def _submitted_count(job: dict[str, Any]) -> int:
    """How many jobs a record stands for at submit limits: a pending array's record, each task still pending."""
    if job.get("array_pending"):
        return len(parse_array_ranges(job["array_pending"], "array_pending"))
    return 1


# Records that change no job's group or count (any other op without a job id makes SubmitCounts read every job).
_NO_JOB_OPS = frozenset(
    {
        "cluster_init",
        "member_announce",
        "member_change",
        "set_wal_level",
        "node_register",
        "node_deregister",
        "node_drain",
        "node_resume",
        "node_dispatch_hold",
        "step_create",
        "step_end",
        "assoc_apply",
        "job_priorities",
    }
)
Group = tuple[str, str, str, str]  # (user, account, partition, QOS) of a job's spec


class SubmitCounts(JobTracker):
    """Pending and running jobs per (user, account, partition, QOS): what the submit limits count, kept from the
    applied records (controller/tracking.py); groups(s), under the state lock, brings it up to s. Unwired (a test's
    stand-in raft) it is a full count each time."""

    no_job_ops = _NO_JOB_OPS

    def __init__(self) -> None:
        super().__init__()
        self._of: dict[int, tuple[Group, int]] = {}
        self._groups: dict[Group, int] = {}

    def groups(self, s: ClusterState) -> dict[Group, int]:
        if self.stale(s):
            self.rebuilt(s)
            self._of, self._groups = {}, {}
            for job_id in s.jobs:
                self._add(s, job_id)
        else:
            for job_id in self.touched():
                old = self._of.pop(job_id, None)
                if old is not None:
                    left = self._groups[old[0]] - old[1]
                    if left:
                        self._groups[old[0]] = left
                    else:
                        del self._groups[old[0]]
                self._add(s, job_id)
        self.caught_up(s)
        return self._groups

    def _add(self, s: ClusterState, job_id: int) -> None:
        job = s.jobs.get(job_id)
        # A running job being cancelled no longer counts, as in Slurm, where scancel ends it at once (CG).
        if job is None or job["state"] in FINISHED_STATES or job.get("cancel_requested"):
            return
        js = job["spec"]
        group = (js.get("user", ""), js.get("account") or "", js.get("partition", ""), js.get("qos") or "")
        n = _submitted_count(job)
        self._of[job_id] = (group, n)
        self._groups[group] = self._groups.get(group, 0) + n


def _submitted_usage(
    s: ClusterState, prof: dict[str, Any], spec: dict[str, Any], memo: dict, counts: SubmitCounts
) -> dict[tuple, int]:
    """Pending and running jobs per scope of the submit checks, from the jobs' groups: the scopes are worked out
    once per (user, account, partition, QOS), not once per job."""
    wanted = {_scope_key(scope, spec) for _kind, scope, *_rest in prof["submit"]}
    found: dict[tuple, int] = {}
    for (user, account, partition, qos), n in counts.groups(s).items():
        one = {"user": user, "account": account, "partition": partition, "qos": qos}
        for scope in _scopes(s.assoc, one, memo):
            if scope in wanted:
                found[scope] = found.get(scope, 0) + n
    return found


def submit_problem(
    s: ClusterState, spec: dict[str, Any], new_jobs: int = 1, counts: SubmitCounts | None = None
) -> tuple[str, str] | None:
    """Why a job about to be submitted is refused, as (its limit's reason, one line that starts with the reason, as
    sbatch's first line does in Slurm, and says which limit and what to do), or None. new_jobs: how many jobs the
    submission stands for (an array's tasks). The limits on running jobs refuse only under strict checking: the
    job's QOS has DenyOnLimit (or the job has no QOS, as in Slurm), a Grp limit then taken as a Max one."""
    if not enforced() or s.assoc is None:
        return None
    memo: dict = {}
    prof, _key, qos = _profile_of(s.assoc, spec, memo)
    if prof["submit"]:
        used = _submitted_usage(s, prof, spec, memo, counts or SubmitCounts())
        for _kind, scope, _what, limit, reason in prof["submit"]:
            have = used.get(_scope_key(scope, spec), 0)
            if have + new_jobs > limit:
                return reason, (
                    f"{reason}: {_scope_words(scope, spec)} may have at most {limit} jobs pending or running and has "
                    f"{have}; wait for some to end"
                )
    if qos and not prof["deny"]:
        return None
    request = requested_tres(spec)
    under = f"QOS {qos} has DenyOnLimit" if qos else "the job has no QOS"
    for kind, scope, what, limit, reason in prof["checks"]:
        if kind == "wall" and wall_over(spec, limit):
            asked = int(spec.get("time_limit_secs") or 0)
            return reason, (
                f"{reason}: the job's time limit ({_duration(asked) if asked else 'none'}) is over MaxWall "
                f"{_duration(limit)} and {under}; ask for less with -t"
            )
        if kind in ("job", "tres") and request.get(what, 0) > limit:
            return reason, f"{reason}: the job asks for {what}={request[what]}, over {limit}, and {under}; ask for less"
        if kind == "count" and limit == 0:
            return reason, f"{reason}: {_scope_words(scope, spec)} may run no job and {under}"
    return None


def max_wall(s: ClusterState, spec: dict[str, Any]) -> int | None:
    """The MaxWall a job runs under (its QOS's, else its association's, inherited), None without one: a job
    submitted without -t gets it as its time limit, as Slurm's does."""
    if not enforced() or s.assoc is None:
        return None
    for kind, _scope, _what, limit, _reason in _profile_of(s.assoc, spec, {})[0]["checks"]:
        if kind == "wall":
            return int(limit)
    return None


def _duration(secs: int) -> str:
    """Minutes, as sacctmgr's MaxWall and sbatch -t are written (seconds only when they are not whole)."""
    return f"{secs // 60} minutes" if secs % 60 == 0 else f"{secs} seconds"


def _scope_words(scope: tuple, spec: dict[str, Any]) -> str:
    if scope[0] == "qos":
        return f"QOS {scope[1]}"
    if scope[0] == "qos_user":
        return f"user {spec.get('user', '')} in QOS {scope[1]}"
    account, user, partition = associations.split_key(scope[1])
    if user:
        return f"user {user} in account {account}" + (f" (partition {partition})" if partition else "")
    return f"account {account}"
