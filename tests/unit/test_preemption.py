"""qos_priority preemption: the decision rules (controller/preemption.py), the job_preempt record (state.py), the
plan's blockers (scheduler.py), the config keys and what scontrol/sinfo show of a partition's PreemptMode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spur_hpc import conf
from spur_hpc.cli import nodeview, partview
from spur_hpc.controller import associations, partitions, placement, preemption, wal
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.state import ClusterState
from spur_hpc.proto import slurm_pb2 as pb


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(cpus=1, qos="", partition="default", **kw):
    base = {"name": "j", "script": "true", "user": "u", "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 1}
    base.update(tasks=1, cpus_per_task=cpus, memory_mb=0, time_limit_secs=0, partition=partition, qos=qos, **kw)
    return base


def cluster(cpus=4, qos=(("low", 10, [], ""), ("high", 100, ["low"], ""))) -> ClusterState:
    """A level-5 cluster with node n1 and the QOS given as (name, priority, preempt, preempt_mode)."""
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=5))
    s.apply(
        rec(
            "node_register",
            name="n1",
            address="n1:1",
            cpus=cpus,
            memory_mb=1000,
            version="1",
            build="b",
            partition="default",
            running=[],
            time=1.0,
        )
    )
    puts = [
        {"kind": "qos", "key": name, "row": associations.new_qos(name, 10 + i, priority=p, preempt=pre, preempt_mode=m)}
        for i, (name, p, pre, m) in enumerate(qos)
    ]
    assert s.apply(rec("assoc_apply", puts=puts, deletes=[]))["ok"]
    return s


def run(s: ClusterState, cpus: int, qos: str, **kw) -> int:
    job_id = s.apply(rec("job_submit", spec=spec(cpus, qos, **kw), time=2.0))["job_id"]
    assert s.apply(rec("job_start", job_id=job_id, nodes=["n1"], attempt=1, time=3.0 + job_id))["ok"]
    return job_id


def submit(s: ClusterState, cpus: int, qos: str) -> dict:
    return s.jobs[s.apply(rec("job_submit", spec=spec(cpus, qos), time=9.0))["job_id"]]


def victims(s: ClusterState, job: dict, modes=None, ending=()) -> list[tuple[int, str]]:
    modes = modes or {}
    free = placement.free_resources(s)
    chosen = preemption.choose_victims(s, job, free, lambda name: modes.get(name, "cancel"), ending)
    return [(v.job_id, v.mode) for v in chosen]


# ------------------------------------------------------------------ the rules


def test_a_qos_may_preempt_only_what_it_lists_and_outranks() -> None:
    high = associations.new_qos("high", 2, priority=100, preempt=["low", "peer"])
    assert preemption.may_preempt(high, associations.new_qos("low", 3, priority=10))
    assert not preemption.may_preempt(high, associations.new_qos("peer", 4, priority=100))  # not strictly higher
    assert not preemption.may_preempt(high, associations.new_qos("other", 5, priority=0))  # not listed
    assert not preemption.may_preempt(associations.new_qos("low", 3, priority=10), high)


@pytest.mark.parametrize(
    ("qos_mode", "partition_modes", "expected"),
    [
        ("", ["cancel"], "cancel"),
        ("", ["off", "requeue", "cancel"], "requeue"),  # the most aggressive of the partitions'
        ("", [], "off"),
        ("off", ["cancel"], "off"),  # off on the QOS protects, even against the partition
        ("requeue", ["off"], "requeue"),  # the QOS's own mode wins over the partition's
        ("CANCEL", ["off"], "cancel"),
        ("suspend", ["cancel"], "off"),  # a mode this engine does not carry out protects instead
    ],
)
def test_the_victims_action_is_its_qos_mode_else_its_partitions(qos_mode, partition_modes, expected) -> None:
    qos = associations.new_qos("low", 3, preempt_mode=qos_mode)
    assert preemption.victim_mode(qos, partition_modes) == expected


def test_only_as_many_victims_as_the_job_needs_the_youngest_first() -> None:
    s = cluster()
    older, younger = run(s, 2, "low"), run(s, 2, "low")
    assert victims(s, submit(s, 2, "high")) == [(younger, "cancel")]
    assert victims(s, submit(s, 4, "high")) == [(younger, "cancel"), (older, "cancel")]  # least valuable first
    assert victims(s, submit(s, 5, "high")) == []  # even both would not make room: none


def test_the_lower_qos_priority_goes_before_the_younger_job() -> None:
    s = cluster(qos=(("low", 10, [], ""), ("mid", 50, [], ""), ("high", 100, ["low", "mid"], "")))
    low, _mid = run(s, 2, "low"), run(s, 2, "mid")
    assert victims(s, submit(s, 2, "high")) == [(low, "cancel")]


def test_nothing_is_preempted_for_a_job_that_fits_or_whose_qos_lists_nothing() -> None:
    s = cluster()
    run(s, 2, "low")
    assert victims(s, submit(s, 2, "high")) == []  # 2 CPUs are free already: nothing to preempt for
    assert victims(s, submit(s, 4, "low")) == []  # low lists no QOS
    assert victims(s, submit(s, 4, "")) == []  # normal lists none either


def test_protected_ending_and_equal_jobs_are_never_chosen() -> None:
    s = cluster(qos=(("low", 10, [], "off"), ("high", 100, ["low", "burst"], ""), ("burst", 5, [], "")))
    run(s, 2, "low")  # its QOS says off: protected although the partition says cancel
    burst = run(s, 2, "burst")
    job = submit(s, 4, "high")
    assert victims(s, job) == []  # the protected job's 2 CPUs are needed too
    assert victims(s, submit(s, 2, "high")) == [(burst, "cancel")]
    assert victims(s, submit(s, 2, "high"), ending={burst}) == []  # already being preempted


def test_the_partition_mode_decides_for_a_qos_without_one() -> None:
    s = cluster()
    victim = run(s, 4, "low")
    assert victims(s, submit(s, 1, "high"), modes={"default": "requeue"}) == [(victim, "requeue")]
    assert victims(s, submit(s, 1, "high"), modes={"default": "off"}) == []


def test_a_cluster_before_level_5_keeps_no_qos_and_preempts_nothing() -> None:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=4))
    assert s.assoc is None
    assert preemption.choose_victims(s, {"spec": spec(qos="high")}, {}, lambda n: "cancel") == []


# ------------------------------------------------------------------ the record


def test_cancel_mode_ends_the_victim_preempted_once_its_end_is_reported() -> None:
    s = cluster()
    victim = run(s, 4, "low")
    job = submit(s, 4, "high")
    result = s.apply(rec("job_preempt", job_id=victim, attempt=1, by_job_id=job["job_id"], mode="cancel", time=20.0))
    assert result == {"ok": True, "mode": "cancel", "attempt": 1, "nodes": ["n1"]}
    v = s.jobs[victim]
    assert v["state"] == "RUNNING" and v["cancel_requested"]  # it holds n1 until its processes are gone
    assert (v["preempted_by"], v["preempt_time"]) == (job["job_id"], 20.0)
    again = s.apply(rec("job_preempt", job_id=victim, attempt=1, by_job_id=job["job_id"], mode="cancel", time=21.0))
    assert again["code"] == "conflict"  # no second preemption while it ends
    end = {"job_id": victim, "attempt": 1, "state": "CANCELLED", "exit_code": 0, "signal": 9, "time": 22.0}
    assert s.apply(rec("job_end", **end))["state"] == "PREEMPTED"
    assert (v["state"], v["reason"], s.nodes["n1"]["alloc_cpus"]) == ("PREEMPTED", "None", 0)


def test_requeue_mode_puts_the_victim_back_pending_with_its_restart_counted() -> None:
    s = cluster()
    victim = run(s, 4, "low")
    job = submit(s, 4, "high")
    result = s.apply(rec("job_preempt", job_id=victim, attempt=1, by_job_id=job["job_id"], mode="requeue", time=20.0))
    assert result["mode"] == "requeue" and result["attempt"] == 1
    v = s.jobs[victim]
    assert (v["state"], v["restart_count"], v["nodes"], v["preempted_by"]) == ("PENDING", 1, [], job["job_id"])
    assert s.nodes["n1"]["alloc_cpus"] == 0  # the preemptor may start on the next plan
    assert plan_starts(s, 20.0) == [(job["job_id"], ["n1"])]  # the requeued job waits out its BeginTime


def test_requeue_of_a_job_that_may_not_be_requeued_cancels_it_as_slurm() -> None:
    s = cluster()
    victim = run(s, 4, "low", requeue=2)  # --no-requeue
    result = s.apply(rec("job_preempt", job_id=victim, attempt=1, by_job_id=9, mode="requeue", time=20.0))
    assert result["mode"] == "cancel" and s.jobs[victim]["cancel_requested"]


def test_a_bad_or_stale_preempt_record_changes_nothing() -> None:
    s = cluster()
    victim = run(s, 4, "low")
    before = s.fingerprint()
    assert s.apply(rec("job_preempt", job_id=victim, attempt=2, by_job_id=9, mode="cancel", time=20.0))["code"] == (
        "conflict"
    )
    assert s.apply(rec("job_preempt", job_id=victim, attempt=1, by_job_id=9, mode="suspend", time=20.0))["code"] == (
        "invalid"
    )
    assert s.apply(rec("job_preempt", job_id=99, attempt=1, by_job_id=9, mode="cancel", time=20.0))["code"] == (
        "not_found"
    )
    assert s.fingerprint() == before


def test_the_plan_names_the_jobs_that_did_not_fit() -> None:
    s = cluster()
    run(s, 3, "low")
    small, big = submit(s, 1, "high"), submit(s, 2, "high")
    blockers: list[int] = []
    assert plan_starts(s, 20.0, blockers=blockers) == [(small["job_id"], ["n1"])]
    assert blockers == [big["job_id"]]


# ------------------------------------------------------------------ configuration and display


def test_preempt_type_and_partition_preempt_mode_are_checked(tmp_path) -> None:
    path = tmp_path / "spur.conf"
    path.write_text(
        '[scheduler]\npreempt_type = "qos_priority"\n[partitions.low]\nnodes = "n1"\npreempt_mode = "requeue"\n'
    )
    loaded = conf.load(str(path))
    assert loaded.scheduler.preempt_type == "qos_priority"
    table = partitions.PartitionTable.from_conf(loaded)
    assert (table.preempt_mode("low"), table.preempt_mode("implied")) == ("requeue", "off")
    assert conf.Config().scheduler.preempt_type == "none"  # off unless asked for
    path.write_text('[partitions.low]\nnodes = "n1"\npreempt_mode = "suspend"\n')
    with pytest.raises(conf.ConfigError, match="preempt_mode"):
        conf.load(str(path))


def _golden(name: str) -> list[str]:
    path = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-preempt" / f"{name}.json"
    return json.loads(path.read_text())["stdout"].splitlines()


def test_show_partition_and_sinfo_of_a_cancel_partition_are_slurms() -> None:
    """The capture's partition work (PreemptMode=CANCEL, one 2-CPU node), printed by Spur as Slurm printed it."""
    node = pb.Node(name="n1", state=pb.IDLE, resources=pb.NodeResources(cpus=2, memory_mb=4096), partition="work")
    message = pb.Partition(name="work", nodes=["n1"], is_default=True, state="UP", preempt_mode="cancel")
    lines = partview.show_partition_lines(nodeview.PartitionView(message), {"n1": node})
    assert lines == [line for line in _golden("006-scontrol-show-partition") if line]
    layout = nodeview.Layout(node_oriented=False)
    parts = [nodeview.PartitionView(message)]
    fields = nodeview.parse_format("%P %M")
    shown = nodeview.sinfo_lines([node], fields, layout, header=True, partitions=parts)
    assert shown == _golden("007-sinfo-preemptmode")


def test_show_partition_and_sinfo_print_the_partitions_preempt_mode() -> None:
    part = nodeview.PartitionView(pb.Partition(name="low", nodes=["n1"], preempt_mode="requeue"))
    node = pb.Node(name="n1", state=pb.IDLE, resources=pb.NodeResources(cpus=4), partition="low")
    assert "   OverTimeLimit=NONE PreemptMode=REQUEUE" in partview.show_partition_lines(part, {"n1": node})
    assert nodeview.preempt_mode_text(nodeview.PartitionView(pb.Partition(name="x"))) == "OFF"  # an older controller


def test_show_job_prints_slurms_preempt_line_for_a_started_job_preempted_before() -> None:
    """As the capture slurm-22.05-preempt shows: a preempted job's line names its start and when it was preempted;
    a requeued job waiting has none; its next run says PreemptTime=None."""
    from spur_hpc.cli import jobrecord

    def preempt_lines(**fields) -> list[str]:
        job = pb.Job(job_id=5, **fields)
        job.spec.name, job.spec.user = "v", "root"
        lines = jobrecord.show_job_lines(job, 2.0e9, group_of=lambda j: ("root(0)", "root(0)"))
        return [line for line in lines if "Preempt" in line]

    start, preempted, again = 1.0e9, 1.0e9 + 60, 1.0e9 + 300
    stamp = jobrecord.units.format_timestamp
    assert preempt_lines(state=pb.PREEMPTED, start_time=start, end_time=preempted, preempt_time=preempted) == [
        f"   PreemptEligibleTime={stamp(start)} PreemptTime={stamp(preempted)}"
    ]
    assert preempt_lines(state=pb.PENDING, preempt_time=preempted, restart_count=1) == []
    assert preempt_lines(state=pb.RUNNING, start_time=again, preempt_time=preempted) == [
        f"   PreemptEligibleTime={stamp(again)} PreemptTime=None"
    ]
    assert preempt_lines(state=pb.RUNNING, start_time=start) == []  # never preempted


def test_show_config_names_preempt_qos_under_qos_priority(tmp_path) -> None:
    from types import SimpleNamespace

    from spur_hpc.cli import jobcontrol

    path = tmp_path / "spur.conf"
    info = SimpleNamespace(cluster_name="c", next_job_id=1)
    for preempt_type, shown in (("qos_priority", "preempt/qos"), ("none", "preempt/none")):
        path.write_text(f'[scheduler]\npreempt_type = "{preempt_type}"\n')
        pairs = dict(jobcontrol.config_pairs(conf.load(str(path)), info, ["h:6817"], str(path)))
        assert pairs["PreemptType"] == shown


# ------------------------------------------------------------------ the plan's order


def test_preempt_levels_rank_each_qos_above_every_qos_it_may_preempt() -> None:
    s = cluster(
        qos=(
            ("low", 10, [], ""),
            ("high", 100, ["low"], ""),
            ("top", 200, ["high", "low"], ""),
            ("peer", 100, ["high"], ""),
        )
    )
    assert preemption.preempt_levels(s.assoc) == {"high": 1, "top": 2}  # peer's priority is not above high's
    assert preemption.preempt_levels(s.assoc) is preemption.preempt_levels(s.assoc)  # worked out once per table


def test_a_preemptor_is_planned_before_the_older_jobs_it_may_preempt_and_becomes_the_blocker() -> None:
    """As Slurm sorts its queue: a high job waiting behind an older low job that does not fit still preempts."""
    from spur_hpc.controller.scheduler import JobIndex

    s = cluster()
    run(s, 2, "low")
    older, high = submit(s, 4, "low"), submit(s, 4, "high")
    index = JobIndex()
    blockers: list[int] = []
    assert plan_starts(s, 20.0, index, blockers=blockers) == [] and blockers == [older["job_id"]]  # off: FIFO
    index.levels_of = lambda st: preemption.preempt_levels(st.assoc)
    blockers.clear()
    assert plan_starts(s, 20.0, index, blockers=blockers) == [] and blockers == [high["job_id"]]
    assert victims(s, high) != []
