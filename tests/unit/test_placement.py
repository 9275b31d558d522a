"""Placement options through the replicated state machine and the planner: -w/--nodelist, -x/--exclude,
--exclusive, --ntasks-per-node, --mem-per-cpu, --gres and --gpus*, --constraint; what a job that can never
fit is told at submit, the pending reasons of one that waits, and --test-only's estimate."""

from __future__ import annotations

import pytest
from test_conf import agent_toml, load_text, one_line_error

from spur_hpc import conf
from spur_hpc.controller import placement, wal
from spur_hpc.controller.scheduler import plan_starts
from spur_hpc.controller.state import ClusterState


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(**kw):
    base = {
        "name": "j",
        "script": "true",
        "user": "u",
        "uid": 1,
        "gid": 1,
        "work_dir": "/tmp",
        "nodes": 0,
        "tasks": 0,
        "cpus_per_task": 1,
        "memory_mb": 0,
        "time_limit_secs": 0,
        "partition": "default",
    }
    base.update(kw)
    # What the service does at submit: the counts Slurm derives, then the defaults.
    assert placement.normalize(base) is None
    for key in ("nodes", "tasks"):
        base[key] = base[key] or 1
    return base


def cluster(*nodes) -> ClusterState:
    """nodes: (name, cpus, gres, features) tuples."""
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1"], wal_level=3))
    for name, cpus, gres, features in nodes:
        register(s, name, cpus, gres, features)
    return s


def register(s, name, cpus=4, gres=None, features=()):
    result = s.apply(
        rec(
            "node_register",
            name=name,
            address=f"{name}:6818",
            cpus=cpus,
            memory_mb=1000,
            version="1",
            build="b",
            partition="default",
            running=[],
            time=10.0,
            gres=dict(gres or {}),
            features=list(features),
        )
    )
    assert result["ok"], result


def four_nodes() -> ClusterState:
    return cluster(*[(f"n{i}", 4, {}, ()) for i in range(1, 5)])


def submit(s, **kw) -> int:
    return s.apply(rec("job_submit", spec=spec(**kw), key="", time=1.0))["job_id"]


def start_planned(s) -> list[tuple[int, list[str]]]:
    """Plan, then write each start as the leader does; every planned start must be accepted."""
    plans = plan_starts(s, now=5.0)
    for job_id, nodes in plans:
        result = s.apply(rec("job_start", job_id=job_id, nodes=nodes, attempt=1, time=2.0))
        assert result["ok"], result
    return plans


def end(s, job_id):
    s.apply(rec("job_end", job_id=job_id, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=3.0))


def test_a_job_naming_a_node_gets_it_plus_others_to_reach_its_node_count() -> None:
    s = four_nodes()
    job = submit(s, nodelist="n3", nodes=2)
    assert start_planned(s) == [(job, ["n3", "n1"])]


def test_a_nodelist_longer_than_the_node_count_raises_the_count() -> None:
    s = four_nodes()
    job = submit(s, nodelist="n[2-4]", nodes=1)
    assert s.jobs[job]["spec"]["nodes"] == 3
    assert start_planned(s) == [(job, ["n2", "n3", "n4"])]


def test_a_job_waits_for_its_busy_named_node_with_reason_resources() -> None:
    s = cluster(("n1", 2, {}, ()), ("n2", 2, {}, ()))
    busy = submit(s, nodelist="n2", cpus_per_task=2)
    start_planned(s)
    waiting = submit(s, nodelist="n2")
    assert start_planned(s) == [], "n1 is free, but the job named n2"
    assert placement.pending_reason(s, s.jobs[waiting]) == placement.REASON_RESOURCES
    end(s, busy)
    assert start_planned(s) == [(waiting, ["n2"])]


def test_a_job_naming_a_drained_node_waits_with_reason_reqnodenotavail() -> None:
    s = four_nodes()
    s.apply(rec("node_drain", name="n2", reason="repair", set_by="admin", time=2.0))
    job = submit(s, nodelist="n2")
    assert start_planned(s) == []
    assert placement.pending_reason(s, s.jobs[job]) == placement.REASON_NODE_NOT_AVAIL


def test_an_excluded_node_gets_nothing() -> None:
    s = cluster(("n1", 4, {}, ()), ("n2", 4, {}, ()))
    jobs = [submit(s, exclude="n1") for _ in range(3)]
    plans = start_planned(s)
    assert plans == [(j, ["n2"]) for j in jobs]
    assert not s.nodes["n1"]["jobs"]


def test_the_state_machine_refuses_a_start_without_a_named_node_or_on_an_excluded_one() -> None:
    s = four_nodes()
    named = submit(s, nodelist="n3")
    refused = s.apply(rec("job_start", job_id=named, nodes=["n1"], attempt=1, time=2.0))
    assert not refused["ok"] and "n3" in refused["message"]
    excluded = submit(s, exclude="n1")
    refused = s.apply(rec("job_start", job_id=excluded, nodes=["n1"], attempt=1, time=2.0))
    assert not refused["ok"] and refused["code"] == "conflict"


def test_an_exclusive_job_takes_an_idle_node_alone_and_gives_it_back() -> None:
    s = cluster(("n1", 4, {}, ()), ("n2", 4, {}, ()))
    small = submit(s)
    start_planned(s)
    exclusive = submit(s, exclusive=True)
    assert start_planned(s) == [(exclusive, ["n2"])], "n1 runs a job, so only n2 is idle"
    assert s.nodes["n2"]["alloc_cpus"] == 4, "an exclusive job holds every CPU of its node"
    assert s.node_state(s.nodes["n2"]) == "ALLOCATED"
    others = [submit(s) for _ in range(4)]
    plans = start_planned(s)
    assert all(nodes == ["n1"] for _j, nodes in plans) and len(plans) == 3, "nothing joins the exclusive job"
    end(s, exclusive)
    assert s.nodes["n2"]["alloc_cpus"] == 0 and not s.nodes["n2"].get("exclusive_job")
    assert start_planned(s) == [(others[3], ["n2"])]
    assert small in s.nodes["n1"]["jobs"]


def test_an_exclusive_job_waits_while_every_node_runs_something() -> None:
    s = cluster(("n1", 4, {}, ()))
    submit(s)
    start_planned(s)
    exclusive = submit(s, exclusive=True)
    assert start_planned(s) == []
    assert placement.pending_reason(s, s.jobs[exclusive]) == placement.REASON_RESOURCES


@pytest.mark.parametrize(
    ("given", "nodes", "tasks"),
    [
        ({"tasks": 5, "ntasks_per_node": 2}, 3, 5),  # -n 5 --ntasks-per-node=2: ceil(5/2) nodes
        ({"nodes": 2, "ntasks_per_node": 3}, 2, 6),  # -N 2 --ntasks-per-node=3: 6 tasks
        ({"ntasks_per_node": 4}, 1, 4),  # alone: one node running that many tasks
        ({"nodes": 2, "tasks": 2, "ntasks_per_node": 4}, 2, 2),  # all given: as given
    ],
)
def test_ntasks_per_node_sets_the_counts_slurm_derives(given: dict, nodes: int, tasks: int) -> None:
    job = spec(**given)
    assert (job["nodes"], job["tasks"]) == (nodes, tasks)


def test_ntasks_per_node_spreads_the_job_over_the_nodes_it_derives() -> None:
    s = four_nodes()
    job = submit(s, tasks=6, ntasks_per_node=2)
    assert start_planned(s) == [(job, ["n1", "n2", "n3"])]
    assert [s.nodes[n]["alloc_cpus"] for n in ("n1", "n2", "n3")] == [2, 2, 2]


def test_mem_per_cpu_asks_for_that_much_memory_for_each_cpu_held_on_a_node() -> None:
    s = cluster(("n1", 4, {}, ()))  # 1000 MB
    too_big = spec(tasks=4, mem_per_cpu_mb=300)  # 1200 MB on one node
    assert "1200 MB per node" in placement.never_fits(s, too_big)
    job = submit(s, tasks=3, mem_per_cpu_mb=300)
    start_planned(s)
    assert s.nodes["n1"]["alloc_mem"] == 900
    exclusive = submit(s, exclusive=True, mem_per_cpu_mb=200)
    end(s, job)
    start_planned(s)
    assert s.nodes["n1"]["alloc_mem"] == 800, "an exclusive job holds every CPU, so memory for each of them"
    end(s, exclusive)
    assert s.nodes["n1"]["alloc_mem"] == 0


def test_mem_and_mem_per_cpu_together_are_refused() -> None:
    job = {"memory_mb": 100, "mem_per_cpu_mb": 10}
    assert "exclude each other" in placement.normalize(job)


def test_a_gres_job_waits_while_the_gres_are_held_and_starts_when_they_are_given_back() -> None:
    s = cluster(("n1", 8, {"gpu": 2}, ()), ("n2", 8, {}, ()))
    first = submit(s, gres="gpu:2")
    assert start_planned(s) == [(first, ["n1"])]
    assert s.nodes["n1"]["alloc_gres"] == {"gpu": 2}
    assert placement.job_gres(s.jobs[first]) == {"gpu": 2}
    second = submit(s, gres="gpu:1")
    assert start_planned(s) == [], "CPUs are free on n1, its GPUs are not; n2 has none"
    assert placement.pending_reason(s, s.jobs[second]) == placement.REASON_RESOURCES
    end(s, first)
    assert s.nodes["n1"].get("alloc_gres") == {}
    assert start_planned(s) == [(second, ["n1"])]


def test_gpu_options_add_up_to_a_per_node_gres_demand() -> None:
    assert placement.gres_demand(spec(gpus_per_node="2")) == {"gpu": 2}
    assert placement.gres_demand(spec(gpus_per_task="a100:1", tasks=3)) == {"gpu:a100": 3}
    assert placement.gres_demand(spec(gpus="3", nodes=2)) == {"gpu": 2}
    assert placement.gres_demand(spec(gres="gpu:1,nic", gpus_per_node="1")) == {"gpu": 2, "nic": 1}
    assert placement.gres_demand(spec(gres="gpu:a100:2")) == {"gpu:a100": 2}


def test_an_untyped_gres_request_takes_typed_ones_and_a_typed_one_only_its_type() -> None:
    s = cluster(("n1", 8, {"gpu:a100": 1, "gpu:v100": 1}, ()))
    typed = submit(s, gres="gpu:v100:1")
    untyped = submit(s, gres="gpu:1")
    start_planned(s)
    assert s.jobs[typed]["alloc"]["per_node"]["n1"]["gres"] == {"gpu:v100": 1}
    assert s.jobs[untyped]["alloc"]["per_node"]["n1"]["gres"] == {"gpu:a100": 1}
    assert "no node of partition default has more than 1" in placement.never_fits(s, spec(gres="gpu:a100:2"))


@pytest.mark.parametrize(
    ("constraint", "node"),
    [("ssd", "n1"), ("ssd&big", "n2"), ("big|fast", "n2"), ("fast|ssd&big", "n2"), ("fast|ssd", "n1")],
)
def test_a_constraint_picks_nodes_by_their_features(constraint: str, node: str) -> None:
    s = cluster(("n1", 4, {}, ("ssd",)), ("n2", 4, {}, ("ssd", "big")), ("n3", 4, {}, ()))
    job = submit(s, constraint=constraint)
    assert start_planned(s) == [(job, [node])]


@pytest.mark.parametrize("constraint", ["[a|b]", "a*2", "(a|b)&c", "a,b"])
def test_constraint_forms_spur_does_not_support_are_refused_with_one_line(constraint: str) -> None:
    problem = placement.normalize({"constraint": constraint})
    assert problem and "not supported" in problem and "\n" not in problem


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"nodelist": "n9"}, "node n9 named by --nodelist does not exist"),
        ({"gres": "gpu:3"}, "asks for 3 gpu per node"),
        ({"gres": "fpga:1"}, "asks for 1 fpga per node"),
        ({"constraint": "nvme"}, "0 node(s) of partition default have those features"),
        ({"nodes": 2, "exclude": "n1"}, "--exclude leaves 1 node(s) of partition default and the job needs 2"),
        ({"cpus_per_task": 16}, "asks for 16 CPUs per node"),
        ({"nodes": 2, "gres": "gpu:1"}, "needs 2 nodes with all it asks for"),
    ],
)
def test_a_job_that_can_never_fit_is_refused_at_submit_with_one_line(fields: dict, complaint: str) -> None:
    s = cluster(("n1", 4, {"gpu": 2}, ("ssd",)), ("n2", 4, {}, ()))
    problem = placement.never_fits(s, spec(**fields))
    assert problem and complaint in problem and "\n" not in problem


def test_a_job_that_fits_later_is_not_refused_at_submit() -> None:
    s = cluster(("n1", 4, {"gpu": 2}, ("ssd",)), ("n2", 4, {}, ()))
    assert placement.never_fits(s, spec(gres="gpu:2", constraint="ssd", nodelist="n1", exclusive=True)) is None


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"gres": "gpu:0"}, "is not NAME[:TYPE][:COUNT]"),
        ({"gres": "gpu:a:b:c"}, "is not NAME[:TYPE][:COUNT]"),
        ({"gpus": "x"}, "is not [TYPE:]COUNT"),
        ({"nodelist": "n[1-"}, "unbalanced brackets"),
        ({"nodelist": "n1", "exclude": "n[1-2]"}, "both in --nodelist and in --exclude"),
        ({"ntasks_per_node": -1}, "out of range"),
    ],
)
def test_a_malformed_placement_option_is_one_line(fields: dict, complaint: str) -> None:
    problem = placement.normalize(dict(fields))
    assert problem and complaint in problem and "\n" not in problem


def test_placement_options_are_refused_until_the_cluster_runs_wal_level_3() -> None:
    assert placement.uses_level3(spec(exclusive=True)) == "--exclusive"
    assert placement.uses_level3(spec(gres="gpu:1")) == "--gres"
    assert placement.uses_level3(spec(tasks=4, ntasks_per_node=2)) is None, "the derived counts are plain fields"


def test_the_test_only_estimate_is_now_or_the_earliest_end_of_a_running_job() -> None:
    s = cluster(("n1", 2, {}, ()))
    probe = {"job_id": 0, "spec": spec(cpus_per_task=2)}
    assert placement.start_estimate(s, probe, now=100.0) == 100.0
    a = submit(s, cpus_per_task=2, time_limit_secs=600)
    start_planned(s)  # started at 2.0
    assert placement.start_estimate(s, probe, now=100.0) == 602.0
    end(s, a)
    b = submit(s, cpus_per_task=2)
    start_planned(s)
    assert placement.start_estimate(s, probe, now=100.0) == 0.0, "no running job has a time limit"
    assert s.jobs[b]["state"] == "RUNNING"


def test_an_allocation_written_before_per_node_shares_is_released() -> None:
    s = four_nodes()
    job = submit(s, cpus_per_task=2)
    start_planned(s)
    s.jobs[job]["alloc"] = {"cpus": 2, "memory_mb": 0}  # as an older release wrote it
    end(s, job)
    assert s.nodes["n1"]["alloc_cpus"] == 0 and not s.nodes["n1"]["jobs"]


def test_a_node_registers_its_gres_and_features() -> None:
    s = cluster(("n1", 4, {"gpu": 2, "nic": 1}, ("ssd", "avx2")))
    assert s.nodes["n1"]["gres"] == {"gpu": 2, "nic": 1}
    assert s.nodes["n1"]["features"] == ["ssd", "avx2"]
    assert placement.node_offer_problem({"gpu!": 1}, []) is not None
    assert placement.node_offer_problem({}, ["a b"]) is not None
    assert placement.node_offer_problem({"gpu:a100": 4}, ["ssd"]) is None


def test_squeue_reasons_follow_the_plan_resources_first_then_priority() -> None:
    s = cluster(("n1", 2, {}, ()), ("n2", 2, {}, ()))
    s.apply(rec("node_drain", name="n2", reason="repair", set_by="admin", time=2.0))
    busy = submit(s, cpus_per_task=2)
    start_planned(s)
    first, second = submit(s, cpus_per_task=2), submit(s)
    memo: dict = {}
    assert placement.queue_reason(s, s.jobs[first], memo) == placement.REASON_RESOURCES
    assert placement.queue_reason(s, s.jobs[second], memo) == placement.REASON_PRIORITY
    named = submit(s, nodelist="n2")
    assert placement.queue_reason(s, s.jobs[named], {}) == placement.REASON_NODE_NOT_AVAIL
    end(s, busy)
    assert placement.queue_reason(s, s.jobs[first], {}) is None, "it fits now: it starts on the next plan"


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"gres": '"gpu:2"'}, "[agent] gres: bad value 'gpu:2'; use NAME[:TYPE]=COUNT entries"),
        ({"gres": '"gpu=1,gpu=2"'}, "[agent] gres: 'gpu=1,gpu=2' names a resource twice"),
        ({"gres": '"gpu=9999999"'}, "[agent] gres: gpu=9999999 is out of range"),
        ({"gres": '"' + ",".join(f"g{i}=1" for i in range(33)) + '"'}, "(at most 32)"),
        ({"features": '["a b"]'}, "[agent] features: bad value 'a b'"),
        ({"features": "[" + ",".join(f'"f{i}"' for i in range(65)) + "]"}, "[agent] features: 65 features"),
    ],
)
def test_a_bad_agent_gres_or_feature_is_one_line_naming_the_key(tmp_path, over: dict, needle: str) -> None:
    assert needle in one_line_error(load_text, tmp_path, agent_toml(**over), role="agent")


def test_agent_gres_and_features_are_read_into_what_spurd_registers(tmp_path) -> None:
    loaded = load_text(tmp_path, agent_toml(gres='"gpu=2,gpu:a100=1,nic=1"', features='["ssd", "avx2"]'), role="agent")
    assert conf.parse_gres_offer(loaded.agent.gres) == {"gpu": 2, "gpu:a100": 1, "nic": 1}
    assert list(loaded.agent.features) == ["ssd", "avx2"]
    assert conf.parse_gres_offer(load_text(tmp_path, agent_toml(), role="agent").agent.gres) == {}
