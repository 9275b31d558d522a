"""Association and QOS limits (controller/limits.py): every pending reason Spur gives, the inheritance up the account
tree, a QOS limit hiding the association's, the plan never starting more than a limit allows (a property over
random limits and queues), and the refusals at submit (submit limits; DenyOnLimit)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spur_hpc.controller import associations, eligibility, limits, wal
from spur_hpc.controller.associations import assoc_key, new_account, new_assoc, new_qos, new_user
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.state import ClusterState


def rec(op, **kw):
    return wal.make_record(op, **kw)


@pytest.fixture(autouse=True)
def limits_on():
    limits.configure({"limits"})
    yield
    limits.configure(set())


def spec(user="alice", account="phys", qos="normal", cpus=1, **kw):
    base = {"name": "j", "script": "true", "user": user, "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 1}
    base.update(tasks=1, cpus_per_task=cpus, memory_mb=0, time_limit_secs=600, partition="default")
    base.update(account=account, qos=qos, **kw)
    return base


def cluster(nodes=2, cpus=8, gpus=0) -> ClusterState:
    """Level 5; nodes n1.. of `cpus` CPUs and 8000 MB (and `gpus` gpus); accounts root > dept > phys, chem;
    users alice and bob in phys, carol in chem; QOS normal and long (each without limits)."""
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=5))
    for n in range(1, nodes + 1):
        s.apply(
            rec("node_register", name=f"n{n}", address=f"n{n}:1", cpus=cpus, memory_mb=8000, version="1", build="b",
                partition="default", running=[], time=1.0, gres={"gpu": gpus} if gpus else {})
        )  # fmt: skip
    put("account", "dept", new_account("dept", "root"))
    put("account", "phys", new_account("phys", "dept"))
    put("account", "chem", new_account("chem", "dept"))
    put("assoc", assoc_key("dept"), new_assoc(10, "c", "dept", parent="root"))
    put("assoc", assoc_key("phys"), new_assoc(11, "c", "phys", parent="dept"))
    put("assoc", assoc_key("chem"), new_assoc(12, "c", "chem", parent="dept"))
    for n, (user, account) in enumerate((("alice", "phys"), ("bob", "phys"), ("carol", "chem"))):
        put("user", user, new_user(user, account))
        put("assoc", assoc_key(account, user), new_assoc(20 + n, "c", account, user, parent=account))
    put("qos", "long", new_qos("long", 2))
    apply_puts(s)
    return s


_PUTS: list[dict] = []


def put(kind, key, row) -> None:
    _PUTS.append({"kind": kind, "key": key, "row": row})


def apply_puts(s) -> None:
    result = s.apply(rec("assoc_apply", puts=list(_PUTS), deletes=[]))
    _PUTS.clear()
    assert result["ok"], result


def set_assoc(s, key, **fields) -> None:
    put("assoc", key, dict(s.assoc["assocs"][key], **fields))
    apply_puts(s)


def set_qos(s, name, **fields) -> None:
    put("qos", name, dict(s.assoc["qos"][name], **fields))
    apply_puts(s)


def submit(s, **kw) -> int:
    result = s.apply(rec("job_submit", spec=spec(**kw), key="", time=1.0))
    assert result["ok"], result
    return result["job_id"]


def run(s, job_id, nodes=("n1",)) -> int:
    job = s.jobs[job_id]
    op = "job_array_split" if job.get("array_pending") else "job_start"
    result = s.apply(rec(op, job_id=job_id, nodes=list(nodes), attempt=job["attempt"] + 1, time=10.0))
    assert result["ok"], result
    return result["job_id"]


def end(s, job_id) -> None:
    job = s.jobs[job_id]
    s.apply(rec("job_end", job_id=job_id, attempt=job["attempt"], state="COMPLETED", exit_code=0, signal=0,
                time=20.0, reason=""))  # fmt: skip


def reason(s, job_id):
    return eligibility.waiting_reason(s, s.jobs[job_id], 30.0)


def planned(s, index=None):
    return [j for j, _nodes in plan_starts(s, 30.0, index)]


# ------------------------------------------------------------------ association Grp limits


def test_a_job_over_its_accounts_grptres_cpu_pends_and_starts_when_usage_falls() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), grp_tres={"cpu": 4})
    first = submit(s, cpus=3)
    run(s, first)
    second = submit(s, cpus=2)
    assert reason(s, second) == "AssocGrpCpuLimit"
    assert planned(s) == []
    small = submit(s, cpus=1)
    assert reason(s, small) is None, "3 + 1 CPUs is within cpu=4"
    end(s, first)
    assert reason(s, second) is None
    assert planned(s) == [second, small]


@pytest.mark.parametrize(
    ("tres", "ask", "why"),
    [
        ({"mem": 1000}, {"memory_mb": 800}, "AssocGrpMemLimit"),
        ({"node": 1}, {}, "AssocGrpNodeLimit"),
        ({"gres/gpu": 2}, {"gres": "gpu:2"}, "AssocGrpGRES"),
    ],
)
def test_each_grptres_gives_its_own_reason(tres, ask, why) -> None:
    s = cluster(gpus=4)
    set_assoc(s, assoc_key("phys"), grp_tres=tres)
    run(s, submit(s, **ask))
    assert reason(s, submit(s, **ask)) == why


def test_a_grp_limit_up_the_tree_counts_the_whole_subtree() -> None:
    s = cluster()
    set_assoc(s, assoc_key("dept"), grp_jobs=2)
    run(s, submit(s, user="carol", account="chem"))
    run(s, submit(s, user="bob"))
    assert reason(s, submit(s)) == "AssocGrpJobsLimit", "chem's and phys's jobs count in dept"


def test_a_job_asking_none_of_a_tres_is_not_held_back_by_its_limit() -> None:
    s = cluster(gpus=2)
    set_assoc(s, assoc_key("phys"), grp_tres={"gres/gpu": 2})
    run(s, submit(s, gres="gpu:2"))
    assert reason(s, submit(s)) is None


# ------------------------------------------------------------------ association Max limits


def test_maxjobs_set_on_the_account_holds_each_user_separately() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), max_jobs=1)
    run(s, submit(s))
    assert reason(s, submit(s)) == "AssocMaxJobsLimit"
    assert reason(s, submit(s, user="bob")) is None, "MaxJobs is per user: bob's association inherits its own"


def test_a_users_own_maxjobs_wins_over_the_accounts() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), max_jobs=1)
    set_assoc(s, assoc_key("phys", "alice"), max_jobs=2)
    run(s, submit(s))
    assert reason(s, submit(s)) is None


@pytest.mark.parametrize(("time_limit", "why"), [(600, None), (601, "AssocMaxWallDurationPerJobLimit"),
                                                 (0, "AssocMaxWallDurationPerJobLimit")])  # fmt: skip
def test_maxwall_holds_a_longer_job_and_one_without_a_time_limit(time_limit, why) -> None:
    s = cluster()
    set_assoc(s, assoc_key("dept"), max_wall_secs=600)
    assert reason(s, submit(s, time_limit_secs=time_limit)) == why


@pytest.mark.parametrize(
    ("tres", "ask", "why"),
    [
        ({"cpu": 2}, {"cpus": 3}, "AssocMaxCpuPerJobLimit"),
        ({"mem": 500}, {"memory_mb": 600}, "AssocMaxMemPerJob"),
        ({"node": 1}, {"nodes": 2}, "AssocMaxNodePerJobLimit"),
        ({"gres/gpu": 1}, {"gres": "gpu:2"}, "AssocMaxGRESPerJob"),
    ],
)
def test_maxtresperjob_gives_its_own_reason_even_on_an_empty_cluster(tres, ask, why) -> None:
    s = cluster(gpus=4)
    set_assoc(s, assoc_key("phys"), max_tres_per_job=tres)
    assert reason(s, submit(s, **ask)) == why


# ------------------------------------------------------------------ QOS limits


@pytest.mark.parametrize(
    ("fields", "first", "then", "why"),
    [
        ({"grp_tres": {"cpu": 2}}, {"cpus": 2}, {}, "QOSGrpCpuLimit"),
        ({"grp_tres": {"mem": 1000}}, {"memory_mb": 1000}, {"memory_mb": 1}, "QOSGrpMemLimit"),
        ({"grp_tres": {"gres/gpu": 1}}, {"gres": "gpu:1"}, {"gres": "gpu:1"}, "QOSGrpGRES"),
        ({"grp_jobs": 1}, {}, {}, "QOSGrpJobsLimit"),
        ({"max_jobs_per_user": 1}, {}, {}, "QOSMaxJobsPerUserLimit"),
        ({"max_tres_per_user": {"cpu": 2}}, {"cpus": 2}, {}, "QOSMaxCpuPerUserLimit"),
    ],
)
def test_each_qos_limit_on_running_jobs_gives_its_reason(fields, first, then, why) -> None:
    s = cluster(gpus=2)
    set_qos(s, "long", **fields)
    run(s, submit(s, qos="long", **first))
    assert reason(s, submit(s, qos="long", **then)) == why
    assert reason(s, submit(s, **then)) is None, "a job of another QOS is not held"


def test_qos_maxjobsperuser_pends_the_users_next_job_and_not_another_users() -> None:
    s = cluster()
    set_qos(s, "long", max_jobs_per_user=1)
    run(s, submit(s, qos="long"))
    assert reason(s, submit(s, qos="long")) == "QOSMaxJobsPerUserLimit"
    assert reason(s, submit(s, user="bob", qos="long")) is None


def test_qos_maxwall_and_maxtresperjob() -> None:
    s = cluster()
    set_qos(s, "long", max_wall_secs=60, max_tres_per_job={"cpu": 2})
    assert reason(s, submit(s, qos="long", time_limit_secs=120)) == "QOSMaxWallDurationPerJobLimit"
    assert reason(s, submit(s, qos="long", time_limit_secs=60, cpus=4)) == "QOSMaxCpuPerJobLimit"
    assert reason(s, submit(s, qos="long", time_limit_secs=60, cpus=2)) is None


def test_a_limit_the_qos_sets_hides_the_associations_of_the_same_kind() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), max_jobs=1, grp_tres={"cpu": 1})
    set_qos(s, "long", max_jobs_per_user=3, grp_tres={"cpu": 8})
    for _ in range(2):
        run(s, submit(s, qos="long"))
    assert reason(s, submit(s, qos="long")) is None, "QOS MaxJobsPerUser and GrpTRES cpu replace the association's"
    assert reason(s, submit(s)) == "AssocMaxJobsLimit", "under QOS normal the association's limits hold (counts first)"


def test_the_qos_is_checked_before_the_association_and_job_counts_before_tres() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), grp_jobs=1, grp_tres={"cpu": 1})
    set_qos(s, "long", max_jobs_per_user=1, max_tres_per_user={"cpu": 1})
    run(s, submit(s, qos="long"))
    assert reason(s, submit(s, qos="long")) == "QOSMaxJobsPerUserLimit"
    assert reason(s, submit(s)) == "AssocGrpJobsLimit", "a count (Slurm's pre-select) before any TRES"


def test_nothing_is_held_when_limits_are_not_enforced() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), grp_jobs=1)
    run(s, submit(s))
    waiting = submit(s)
    assert reason(s, waiting) == "AssocGrpJobsLimit"
    limits.configure({"associations", "qos"})
    assert reason(s, waiting) is None
    limits.configure({"safe"})
    assert reason(s, waiting) == "AssocGrpJobsLimit", "safe implies limits"


def test_a_cluster_before_level_5_and_a_job_without_an_association_have_no_limits() -> None:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=4))
    job = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    assert s.assoc is None and reason(s, job) is None
    s = cluster()
    set_assoc(s, assoc_key("root"), grp_jobs=0)
    assert reason(s, submit(s, user="dave", account="")) is None
    assert reason(s, submit(s)) == "AssocGrpJobsLimit", "root's limit holds every association"


# ------------------------------------------------------------------ the plan


@pytest.mark.parametrize("with_index", [False, True])
def test_one_plan_starts_no_more_than_a_limit_allows(with_index) -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), grp_jobs=2)
    jobs = [submit(s) for _ in range(4)]
    other = submit(s, user="carol", account="chem")
    index = JobIndex() if with_index else None
    assert planned(s, index) == [jobs[0], jobs[1], other]


def test_an_arrays_tasks_count_one_by_one() -> None:
    s = cluster()
    set_qos(s, "long", grp_tres={"cpu": 3})
    array = submit(s, qos="long", array="0-9")
    assert planned(s) == [array, array, array]
    for _ in range(3):
        run(s, array)
    assert reason(s, array) == "QOSGrpCpuLimit"


def test_a_running_job_counts_what_it_holds_an_exclusive_one_every_cpu_of_its_node() -> None:
    s = cluster(nodes=2, cpus=8)
    set_assoc(s, assoc_key("phys"), grp_tres={"cpu": 10})
    run(s, submit(s, exclusive=True))
    assert reason(s, submit(s, cpus=3)) == "AssocGrpCpuLimit", "8 held + 3 > 10"
    assert reason(s, submit(s, cpus=2)) is None


# ------------------------------------------------------------------ at submit


def problem(s, **kw):
    found = limits.submit_problem(s, spec(**kw), kw.pop("jobs", 1) if "jobs" in kw else 1)
    return found and found[0]


def test_maxsubmitjobs_refuses_the_next_submission_counting_pending_and_running() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys", "alice"), max_submit_jobs=2)
    run(s, submit(s))
    submit(s)
    assert problem(s) == "AssocMaxSubmitJobLimit"
    assert problem(s, user="bob") is None
    words = limits.submit_problem(s, spec())[1]
    assert "user alice in account phys may have at most 2 jobs pending or running" in words


def test_an_array_counts_its_pending_tasks_at_submit() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), max_submit_jobs=5)
    submit(s, array="0-3")
    assert problem(s) is None
    assert limits.submit_problem(s, spec(), 2)[0] == "AssocMaxSubmitJobLimit", "4 tasks + an array of 2 > 5"


@pytest.mark.parametrize(
    ("where", "fields", "why", "other"),
    [
        ("assoc", {"grp_submit_jobs": 1}, "AssocGrpSubmitJobsLimit", {"user": "bob"}),
        ("qos", {"grp_submit_jobs": 1}, "QOSGrpSubmitJobsLimit", {"user": "carol", "account": "chem"}),
        ("qos", {"max_submit_jobs_per_user": 1}, "QOSMaxSubmitJobPerUserLimit", None),
    ],
)
def test_grp_and_per_user_submit_limits(where, fields, why, other) -> None:
    s = cluster()
    if where == "assoc":
        set_assoc(s, assoc_key("phys"), **fields)
    else:
        set_qos(s, "long", **fields)
    submit(s, qos="long")
    assert problem(s, qos="long") == why
    if other is not None:
        assert problem(s, qos="long", **other) == why, "a Grp limit counts everyone's jobs"
    assert problem(s, user="bob", account="chem", qos="normal") is None


def test_finished_jobs_do_not_count_at_submit() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys", "alice"), max_submit_jobs=1)
    job = submit(s)
    run(s, job)
    end(s, job)
    assert problem(s) is None


def test_without_denyonlimit_a_job_over_maxwall_is_taken_and_with_it_refused() -> None:
    s = cluster()
    set_qos(s, "long", max_wall_secs=600, max_tres_per_job={"cpu": 2})
    assert problem(s, qos="long", time_limit_secs=1200) is None
    set_qos(s, "long", flags=["DenyOnLimit"])
    assert problem(s, qos="long", time_limit_secs=1200) == "QOSMaxWallDurationPerJobLimit"
    assert problem(s, qos="long", cpus=4) == "QOSMaxCpuPerJobLimit"
    assert problem(s, qos="long") is None
    words = limits.submit_problem(s, spec(qos="long", time_limit_secs=1200))[1]
    assert "over MaxWall 10 minutes" in words and "DenyOnLimit" in words


def test_a_job_without_a_qos_is_checked_strictly_as_slurm_does() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), max_wall_secs=600)
    assert problem(s, time_limit_secs=1200) is None
    assert problem(s, qos="", time_limit_secs=1200) == "AssocMaxWallDurationPerJobLimit"
    assert limits.submit_problem(s, spec(qos="", time_limit_secs=1200))[1].startswith(
        "AssocMaxWallDurationPerJobLimit: the job's time limit (20 minutes) is over MaxWall 10 minutes"
    )


def test_denyonlimit_treats_a_grp_limit_as_a_max_limit() -> None:
    s = cluster()
    set_qos(s, "long", flags=["DenyOnLimit"])
    set_assoc(s, assoc_key("phys"), grp_tres={"cpu": 4})
    assert problem(s, qos="long", cpus=5) == "AssocGrpCpuLimit"
    assert problem(s, qos="long", cpus=4) is None


def test_max_wall_is_the_qos_one_else_the_associations() -> None:
    s = cluster()
    assert limits.max_wall(s, spec()) is None
    set_assoc(s, assoc_key("dept"), max_wall_secs=3600)
    assert limits.max_wall(s, spec()) == 3600
    set_qos(s, "long", max_wall_secs=60)
    assert limits.max_wall(s, spec(qos="long")) == 60


def test_requested_and_held_tres() -> None:
    assert limits.requested_tres(spec(cpus=2, nodes=2, tasks=2, memory_mb=100, gres="gpu:a100:1")) == {
        "cpu": 4, "mem": 200, "node": 2, "billing": 4, "gres/gpu": 2, "gres/gpu:a100": 2}  # fmt: skip
    assert limits.requested_tres(spec(cpus=2, mem_per_cpu_mb=10))["mem"] == 20
    s = cluster(gpus=2)
    job = run(s, submit(s, cpus=2, memory_mb=100, gres="gpu:1"))
    assert limits.held_tres(s.jobs[job]) == {"cpu": 2, "mem": 100, "node": 1, "billing": 2, "gres/gpu": 1}


def test_the_store_keeps_the_limits_rows_it_was_given() -> None:
    """The rows limits.py reads are associations.py's: its field names (a rename there must fail here)."""
    row, qos = associations.new_assoc(1, "c", "a"), associations.new_qos("q", 1)
    for field in ("grp_tres", "grp_jobs", "grp_submit_jobs", "max_jobs", "max_submit_jobs", "max_wall_secs",
                  "max_tres_per_job"):  # fmt: skip
        assert field in row
    for field in ("grp_tres", "grp_jobs", "grp_submit_jobs", "max_jobs_per_user", "max_submit_jobs_per_user",
                  "max_wall_secs", "max_tres_per_job", "max_tres_per_user", "flags"):  # fmt: skip
        assert field in qos


def test_submit_counts_kept_from_the_records_equal_a_fresh_count_after_every_record() -> None:
    s = cluster()
    counts = limits.SubmitCounts()

    def apply(op, **kw):
        record = rec(op, **kw)
        result = s.apply(record)
        counts.note(s, record, result)
        assert counts.groups(s) == limits.SubmitCounts().groups(s), op
        return result

    counts.groups(s)
    ids = [apply("job_submit", spec=spec(), key="", time=1.0)["job_id"] for _ in range(3)]
    array = apply("job_submit", spec=spec(user="bob", array="0-4"), key="", time=1.0)["job_id"]
    assert counts.groups(s)[("alice", "phys", "default", "normal")] == 3
    assert counts.groups(s)[("bob", "phys", "default", "normal")] == 5
    apply("job_start", job_id=ids[0], nodes=["n1"], attempt=1, time=2.0)
    apply("job_cancel", job_id=ids[0], by="alice", time=2.5)  # still RUNNING until its end comes: not counted
    assert s.jobs[ids[0]]["state"] == "RUNNING"
    assert counts.groups(s)[("alice", "phys", "default", "normal")] == 2
    task = apply("job_array_split", job_id=array, nodes=["n1"], attempt=1, time=2.0)["job_id"]
    apply("job_end", job_id=ids[0], attempt=1, state="COMPLETED", exit_code=0, signal=0, time=3.0, reason="")
    apply("job_cancel", job_id=ids[1], by="alice", time=3.0)
    apply("job_update", job_id=ids[2], changes={"partition": "other"}, time=3.0)
    apply("job_array_cancel", array_job_id=array, tasks=[2, 3], by="bob", time=3.0)
    apply("node_lost", name="n1", time=4.0, reason="gone")
    apply("jobs_purge", before=10.0)
    # bob: tasks 1 and 4 wait in the array, task 0 was requeued when n1 was lost; 2 and 3 were cancelled
    assert counts.groups(s) == {("alice", "phys", "other", "normal"): 1, ("bob", "phys", "default", "normal"): 3}
    assert s.jobs[task]["state"] == "PENDING"
    rebuilds = counts.rebuilds
    apply("job_submit", spec=spec(), key="", time=5.0)
    assert counts.rebuilds == rebuilds, "a submission is counted without reading every job"


# ------------------------------------------------------------------ the submit path (service.submit)


class _Raft:
    """The state machine applied in place of a Raft log (no listener: SubmitCounts counts afresh)."""

    def __init__(self, s: ClusterState) -> None:
        self.state = s

    def propose(self, record, timeout):
        return self.state.apply(record)

    def read(self, fn):
        return fn(self.state)

    def is_leader(self) -> bool:
        return True


def submitting_service(s, enforce=("limits",)):
    from types import SimpleNamespace

    from spur_hpc import conf
    from spur_hpc.controller.service import ControllerService

    parsed = conf.parse('[partitions.short]\nnodes = "n1"\ndefault = true\nmax_time = "30"\ndefault_time = "5"\n'
                        '[partitions.any]\nnodes = "n2"\n')  # fmt: skip
    settings = SimpleNamespace(
        controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30, job_requeue=True),
        scheduler=SimpleNamespace(enforce_part_limits="NO"),
        partitions=parsed.partitions,
        accounting=SimpleNamespace(enforce=list(enforce)),
    )
    return ControllerService(settings, _Raft(s), lambda addr: None, clock=lambda: 100.0)


def test_submit_gives_a_job_without_t_its_maxwall_unless_the_partitions_maxtime_is_shorter() -> None:
    s = cluster()
    service = submitting_service(s)
    set_qos(s, "long", max_wall_secs=600)
    set_qos(s, "normal", max_wall_secs=3600)
    asked = dict(spec(qos="long", partition="short"), time_limit_secs=0)
    job_id, _dup = service.submit(dict(asked), "")
    assert s.jobs[job_id]["spec"]["time_limit_secs"] == 600, "MaxWall, not the partition's DefaultTime of 5 minutes"
    job_id, _dup = service.submit(dict(asked, qos="normal"), "")
    assert s.jobs[job_id]["spec"]["time_limit_secs"] == 300, "MaxWall over MaxTime 30: the partition's default"
    job_id, _dup = service.submit(dict(asked, partition="any"), "")
    assert s.jobs[job_id]["spec"]["time_limit_secs"] == 600
    job_id, _dup = service.submit(dict(asked, time_limit_secs=1200, partition="any"), "")
    assert s.jobs[job_id]["spec"]["time_limit_secs"] == 1200, "a -t of its own is kept (the job pends on MaxWall)"
    assert eligibility.waiting_reason(s, s.jobs[job_id], 200.0) == "QOSMaxWallDurationPerJobLimit"


def test_submit_refuses_over_a_submit_limit_with_slurms_error_and_not_when_limits_are_off() -> None:
    from spur_hpc.controller import errors

    s = cluster()
    set_assoc(s, assoc_key("phys", "alice"), max_submit_jobs=1)
    service = submitting_service(s)
    service.submit(spec(partition="any"), "")
    with pytest.raises(errors.SlurmRefusal) as refused:
        service.submit(spec(partition="any"), "")
    assert refused.value.slurm_error == limits.SLURM_ACCOUNTING_POLICY
    assert str(refused.value).startswith("AssocMaxSubmitJobLimit: user alice in account phys may have at most 1")
    with pytest.raises(errors.SlurmRefusal):
        service.submit(spec(partition="any", array="0-1"), "")
    submitting_service(s, enforce=("associations",))
    assert service.submit(spec(partition="any"), "")[0], "limits not enforced: taken"


def test_a_job_a_limit_holds_back_is_eligible_in_the_accounting_copy_and_a_held_one_is_not() -> None:
    from spur_hpc.controller.accounting_link import _Facts, _job_copy

    s = cluster()
    set_qos(s, "long", max_jobs_per_user=1)
    run(s, submit(s, qos="long"))
    waiting = submit(s, qos="long")
    held = s.apply(rec("job_submit", spec=spec(hold=True), key="", time=1.0))["job_id"]
    assert reason(s, waiting) == "QOSMaxJobsPerUserLimit"
    copies = {j: _job_copy(s.jobs[j], s, _Facts(30.0, {}, None)) for j in (waiting, held)}
    assert "eligible" not in copies[waiting], "Slurm's sacct shows its Eligible time (the capture)"
    assert copies[held]["eligible"] is False


def test_billing_counts_cpus_and_a_tres_spur_does_not_count_is_no_limit() -> None:
    s = cluster()
    set_assoc(s, assoc_key("phys"), grp_tres={"billing": 2, "fs/disk": 1})
    set_qos(s, "long", max_tres_per_user={"billing": 1})
    run(s, submit(s, cpus=2))
    assert reason(s, submit(s)) == "AssocGrpBilling"
    assert reason(s, submit(s, user="carol", account="chem")) is None, "fs/disk is not a TRES Spur counts"
    run(s, submit(s, user="carol", account="chem", qos="long"))
    assert reason(s, submit(s, user="carol", account="chem", qos="long")) == "QOSMaxBillingPerUser"


# ------------------------------------------------------------------ one plan never passes a limit (property)

_LIMIT = st.sampled_from([-1, 0, 1, 2, 3, 5])
_JOB = st.tuples(st.sampled_from([("alice", "phys"), ("bob", "phys"), ("carol", "chem")]),
                 st.sampled_from(["normal", "long"]), st.integers(1, 3), st.booleans())  # fmt: skip


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    st.fixed_dictionaries(
        {"dept_jobs": _LIMIT, "phys_cpu": _LIMIT, "max_jobs": _LIMIT, "qos_user_jobs": _LIMIT, "qos_cpu": _LIMIT}
    ),
    st.lists(_JOB, min_size=1, max_size=12),
    st.booleans(),
)
def test_after_one_plan_every_limit_holds(lims, jobs, with_index) -> None:
    s = cluster(nodes=3, cpus=8)
    set_assoc(s, assoc_key("dept"), grp_jobs=lims["dept_jobs"])
    set_assoc(s, assoc_key("phys"), grp_tres={"cpu": lims["phys_cpu"]}, max_jobs=lims["max_jobs"])
    set_qos(s, "long", max_jobs_per_user=lims["qos_user_jobs"], grp_tres={"cpu": lims["qos_cpu"]})
    for (user, account), qos, cpus, array in jobs:
        submit(s, user=user, account=account, qos=qos, cpus=cpus, **({"array": "0-2"} if array else {}))
    for job_id, nodes in plan_starts(s, 30.0, JobIndex() if with_index else None):
        run(s, job_id, nodes)
    running = [j for j in s.jobs.values() if j["state"] == "RUNNING"]

    def count(pick, what="jobs"):
        return sum((1 if what == "jobs" else limits.held_tres(j)[what]) for j in running if pick(j["spec"]))

    def within(limit, used):
        return limit == -1 or used <= limit

    long_rule = lims["qos_user_jobs"]
    assert within(lims["dept_jobs"], count(lambda sp: True)), "dept's GrpJobs (every job is under dept)"
    assert within(lims["qos_cpu"], count(lambda sp: sp["qos"] == "long", "cpu")), "QOS long's GrpTRES cpu"
    for user in ("alice", "bob", "carol"):
        assert within(long_rule, count(lambda sp, u=user: sp["user"] == u and sp["qos"] == "long"))
    # phys's GrpTRES cpu holds for every job; QOS long's own cpu limit hides it for long's jobs
    assert within(
        lims["phys_cpu"],
        count(lambda sp: sp["account"] == "phys" and (sp["qos"] != "long" or lims["qos_cpu"] == -1), "cpu"),
    )
    for user in ("alice", "bob"):  # MaxJobs: hidden by QOS long's MaxJobsPerUser for long's jobs
        assert within(
            lims["max_jobs"], count(lambda sp, u=user: sp["user"] == u and (sp["qos"] != "long" or long_rule == -1))
        )
