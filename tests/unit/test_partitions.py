"""Partitions as Slurm has them ([partitions.NAME] in spur.conf): the config's checks, each node's membership (a
node in several partitions, tables and the agents' [agent] partition together), the planner on shared nodes
(one CPU never goes to two jobs; a higher PriorityTier first), Slurm's pending reasons of a job its partition
does not run, and the submit path: the default partition and DefaultTime written into the job, Slurm's
refusals for an unknown, a DRAIN or an INACTIVE partition, EnforcePartLimits."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from test_conf import ConfigError, controller_toml, load_text, secret  # noqa: F401 (secret: a fixture)
from test_placement import rec, register, spec

from spur_hpc import conf, model
from spur_hpc.controller import errors, partitions, placement
from spur_hpc.controller.partitions import PartitionTable
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.state import ClusterState

REPLAY = """
[partitions.debug]
nodes = "n1,n2"
default = true
max_time = "60"
[partitions.long]
nodes = "n[3-4]"
max_time = "INFINITE"
"""


def table(text: str) -> PartitionTable:
    c = conf.parse(text)
    conf.validate(c, None)
    return PartitionTable(c.partitions)


def state(*names: str, declared: str = "default", level: int = 4) -> ClusterState:
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id-1", members=["a:1"], wal_level=level))
    for name in names:
        register(s, name)
        s.nodes[name]["partition"] = declared  # what its agent declared ([agent] partition)
    return s


def submit(s, **kw) -> int:
    return s.apply(rec("job_submit", spec=spec(**kw), key="", time=1.0))["job_id"]


def config_error(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        conf.validate(conf.parse(text), None)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# ------------------------------------------------------------------ spur.conf


def test_partition_tables_parse_in_the_files_order_with_slurms_time_forms():
    c = conf.parse(REPLAY + '[partitions.gpu]\nnodes = "ALL"\nmax_time = "1-12:30"\nmax_nodes = "UNLIMITED"\n')
    assert [p.name for p in c.partitions] == ["debug", "long", "gpu"]
    parts = {p.name: p for p in PartitionTable(c.partitions).listing({})}
    assert parts["debug"].max_time_secs == 3600 and parts["debug"].is_default
    assert parts["long"].max_time_secs == 0 and parts["long"].nodes == ("n3", "n4")
    assert parts["gpu"].max_time_secs == 36 * 3600 + 1800 and parts["gpu"].max_nodes == 0


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('[partitions.a]\nnodes = "n[1-"\n', "[partitions.a] nodes: bad hostlist 'n[1-'"),
        ('[partitions.a]\nnodes = "n[1-99999999]"\n', "more than 65536 nodes"),
        ('[partitions.a]\nmax_time = "soon"\n', "[partitions.a] max_time: bad time limit 'soon'; use minutes, MM:SS"),
        (
            '[partitions.a]\nstate = "OFF"\n',
            "[partitions.a] state: unknown value 'OFF'; use UP, DOWN, DRAIN or INACTIVE",
        ),
        ('[partitions.a]\nmax_nodes = "lots"\n', "use an integer from 0 to 1000000 or UNLIMITED"),
        ('[partitions.a]\nmaxtime = "60"\n', "[partitions.a] maxtime: unknown key; remove it or use one of: nodes"),
        ("[partitions]\na = 1\n", "[partitions.a]: expected a table, got 1"),
        ('[partitions."a b"]\n', "bad partition name"),
        ("[partitions.a]\ndefault = true\n[partitions.b]\ndefault = true\n", "partition a is the default already"),
        ('[partitions.a]\nmax_time = "10"\ndefault_time = "20"\n', "'20' is longer than max_time '10'"),
        ("[partitions.a]\nmin_nodes = 3\nmax_nodes = 2\n", "[partitions.a] min_nodes: 3 is above max_nodes 2"),
        ('[scheduler]\nenforce_part_limits = "YES"\n', "use NO, ANY or ALL"),
    ],
)
def test_a_bad_partition_table_is_one_line_naming_the_key_and_the_fix(text, needle):
    assert needle in config_error(text)


def test_state_is_read_in_any_case_as_slurm_reads_it():
    assert conf.parse('[partitions.a]\nstate = "down"\n').partitions[0].state == "DOWN"


# ------------------------------------------------------------------ membership


def test_without_tables_the_agents_partitions_are_implied_and_default_is_the_default():
    s = state("n1", "n2", declared="default")
    s.nodes["n2"]["partition"] = "gpu"
    listing = {p.name: p for p in PartitionTable().listing(s.nodes)}
    assert listing["default"].nodes == ("n1",) and listing["default"].is_default
    assert listing["gpu"].nodes == ("n2",) and not listing["gpu"].is_default and listing["gpu"].implied


def test_tables_rule_and_a_node_no_table_names_serves_its_agents_partition():
    parts = table(REPLAY + '[partitions.all]\nnodes = "n1,n3"\n')
    s = state("n1", "n3", "n9", declared="default")
    assert parts.node_partitions(s.nodes["n1"]) == ("debug", "all")  # several partitions, the file's order
    assert parts.node_partitions(s.nodes["n9"]) == ("default",)  # in no table: its agent's, implied
    s.nodes["n9"]["partition"] = "debug"  # declares a table that does not name it: the table decides
    assert PartitionTable(conf.parse(REPLAY).partitions).node_partitions(s.nodes["n9"]) == ()
    names = [p.name for p in parts.listing(state("n1", "n9").nodes)]
    assert names == ["debug", "long", "all", "default"]
    assert [p.name for p in parts.listing(state("n1", "n9").nodes) if p.is_default] == ["debug"]


def test_with_tables_and_no_default_there_is_no_default_unless_one_is_named_default():
    assert table('[partitions.a]\nnodes = "n1"\n').default(state("n1").nodes) is None
    assert table('[partitions.default]\nnodes = "n1"\n').default(state("n1").nodes).name == "default"


def test_an_all_table_takes_every_registered_node():
    parts = table('[partitions.every]\nnodes = "ALL"\n[partitions.some]\nnodes = "n2"\n')
    s = state("n1", "n2")
    assert parts.node_partitions(s.nodes["n2"]) == ("every", "some")
    assert parts.find(s.nodes, "every").nodes == ("n1", "n2")


# ------------------------------------------------------------------ the planner on shared nodes


def test_a_node_in_two_partitions_serves_both_and_never_gives_one_cpu_twice():
    parts = table('[partitions.a]\nnodes = "n1"\n[partitions.b]\nnodes = "n1"\n')
    s = state("n1")  # 4 CPUs
    jobs = [submit(s, partition=p, cpus_per_task=2) for p in ("a", "b", "a")]
    plans = plan_starts(s, 1.0, parts=parts)
    assert plans == [(jobs[0], ["n1"]), (jobs[1], ["n1"])]  # the third would need CPUs the first two hold
    for job_id, nodes in plans:
        assert s.apply(rec("job_start", job_id=job_id, nodes=nodes, attempt=1, time=2.0))["ok"]
    assert s.nodes["n1"]["alloc_cpus"] == 4
    assert plan_starts(s, 3.0, parts=parts) == [] == plan_starts(s, 3.0, JobIndex(), parts)


def test_the_higher_priority_tier_is_planned_first_on_shared_nodes():
    parts = table('[partitions.low]\nnodes = "n1"\n[partitions.high]\nnodes = "n1"\npriority_tier = 5\n')
    s = state("n1")
    low = submit(s, partition="low", cpus_per_task=4)
    high = submit(s, partition="high", cpus_per_task=4)
    assert plan_starts(s, 1.0, parts=parts) == [(high, ["n1"])]
    assert plan_starts(s, 1.0, JobIndex(), parts) == [(high, ["n1"])]
    assert low


def test_a_job_goes_only_to_nodes_of_its_partition():
    parts = table(REPLAY)
    s = state("n1", "n2", "n3", "n4")
    job = submit(s, partition="long", nodes=2)
    assert plan_starts(s, 1.0, parts=parts) == [(job, ["n3", "n4"])]


def test_before_wal_level_4_the_leader_keeps_to_the_partition_the_agent_declares():
    # A level-3 member's job_start still compares the job's partition with the agent's: the plan must agree.
    parts = table('[partitions.debug]\nnodes = "n1,n2"\n')
    s = state("n1", "n2", declared="debug", level=3)
    s.nodes["n2"]["partition"] = "default"
    job = submit(s, partition="debug", nodes=1)
    assert plan_starts(s, 1.0, parts=parts) == [(job, ["n1"])]
    s.nodes["n1"]["partition"] = "default"
    assert plan_starts(s, 1.0, parts=parts) == []


# ------------------------------------------------------------------ why a queued job waits for its partition


@pytest.mark.parametrize(
    ("extra", "fields", "reason"),
    [
        ("", {"nodes": 5}, model.REASON_PARTITION_NODE_LIMIT),  # more than the partition has (2)
        ("max_nodes = 1\n", {"nodes": 2}, model.REASON_PARTITION_NODE_LIMIT),
        ("min_nodes = 2\n", {"nodes": 1}, model.REASON_PARTITION_NODE_LIMIT),
        ("", {"time_limit_secs": 3601}, model.REASON_PARTITION_TIME_LIMIT),
        ("", {"time_limit_secs": 0}, model.REASON_PARTITION_TIME_LIMIT),  # UNLIMITED is over MaxTime
        ('state = "DOWN"\n', {"nodes": 5}, model.REASON_PARTITION_DOWN),  # a DOWN partition skips the limits
        ('state = "INACTIVE"\n', {}, model.REASON_PARTITION_INACTIVE),
        ('state = "DRAIN"\n', {"time_limit_secs": 60}, None),  # queued jobs of a DRAIN partition run
    ],
)
def test_a_job_its_partition_does_not_run_pends_with_slurms_reason_and_blocks_only_as_slurm_does(extra, fields, reason):
    parts = table(f'[partitions.debug]\nnodes = "n1,n2"\nmax_time = "60"\n{extra}')
    s = state("n1", "n2")
    fields = {"time_limit_secs": 60, **fields}
    job = submit(s, partition="debug", **fields)
    after = submit(s, partition="debug", time_limit_secs=60, nodes=2 if "min_nodes" in extra else 1)
    assert partitions.waiting_reason(parts, s, s.jobs[job]["spec"], {}) == reason
    planned = [job_id for job_id, _ in plan_starts(s, 1.0, parts=parts)]
    assert (job in planned) == (reason is None)
    # Over a limit, the job blocks nobody behind it; a DOWN or INACTIVE partition starts nothing at all.
    assert (after in planned) == (reason not in partitions.PARTITION_WIDE)
    assert planned == [j for j, _ in plan_starts(s, 1.0, JobIndex(), parts)]


def test_a_job_whose_partition_left_the_configuration_waits_with_partitionconfig():
    parts = table(REPLAY)
    s = state("n1")
    job = submit(s, partition="gone")
    assert partitions.waiting_reason(parts, s, s.jobs[job]["spec"], {}) == model.REASON_PARTITION_CONFIG
    assert plan_starts(s, 1.0, parts=parts) == []


def test_more_nodes_than_the_partition_has_is_no_refusal_at_submit():
    s = state("n1", "n2")
    assert placement.never_fits(s, spec(nodes=5), table('[partitions.default]\nnodes = "n1,n2"\n')) is None


# ------------------------------------------------------------------ submit: the controller service


class _Raft:
    def __init__(self, s: ClusterState) -> None:
        self.state = s

    def propose(self, record, timeout):
        return self.state.apply(record)

    def read(self, fn):
        return fn(self.state)

    def is_leader(self) -> bool:
        return True


def service(text: str = REPLAY, enforce: str = "NO") -> ControllerService:
    c = conf.parse(text)
    settings = SimpleNamespace(
        controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30, job_requeue=True),
        scheduler=SimpleNamespace(enforce_part_limits=enforce),
        partitions=c.partitions,
    )
    return ControllerService(settings, _Raft(state("n1", "n2", "n3", "n4")), lambda addr: None, clock=lambda: 100.0)


def job_spec(**kw) -> dict:
    base = spec(**kw)
    if "partition" not in kw:
        base["partition"] = ""
    return base


def refusal(svc: ControllerService, **kw) -> errors.SlurmRefusal:
    with pytest.raises(errors.SlurmRefusal) as caught:
        svc.submit(job_spec(**kw), "")
    assert "\n" not in str(caught.value)
    return caught.value


def test_a_job_without_p_goes_to_the_default_partition_with_its_time_limit_written_in():
    svc = service()
    job_id, _ = svc.submit(job_spec(), "")
    job = svc.get_job(job_id)
    assert job["spec"]["partition"] == "debug" and job["spec"]["time_limit_secs"] == 3600
    long_id, _ = svc.submit(job_spec(partition="long", time_limit_secs=0), "")
    assert svc.get_job(long_id)["spec"]["time_limit_secs"] == 0  # MaxTime=INFINITE: no limit
    short_id, _ = svc.submit(job_spec(time_limit_secs=60), "")
    assert svc.get_job(short_id)["spec"]["time_limit_secs"] == 60  # -t wins


def test_default_time_wins_over_max_time():
    svc = service('[partitions.p]\nnodes = "ALL"\ndefault = true\nmax_time = "2:00:00"\ndefault_time = "10"\n')
    job_id, _ = svc.submit(job_spec(), "")
    assert svc.get_job(job_id)["spec"]["time_limit_secs"] == 600


def test_an_unknown_partition_is_refused_with_slurms_words():
    refused = refusal(service(), partition="nosuchpart")
    assert str(refused) == "invalid partition specified: nosuchpart"
    assert refused.slurm_error == "Invalid partition name specified"


def test_no_default_partition_and_no_p_is_refused_with_slurms_words():
    refused = refusal(service('[partitions.a]\nnodes = "ALL"\n'))
    assert refused.slurm_error == "No partition specified or system default partition"
    assert "pass -p NAME" in str(refused)


@pytest.mark.parametrize("state_name", ["DRAIN", "INACTIVE"])
def test_a_drain_or_inactive_partition_takes_no_new_job(state_name):
    refused = refusal(service(REPLAY + f'[partitions.off]\nnodes = "n1"\nstate = "{state_name}"\n'), partition="off")
    assert refused.slurm_error == "Required partition not available (inactive or drain)"
    assert f"partition off is {state_name}" in str(refused)


def test_a_down_partition_queues_the_job_and_its_reason_is_partitiondown():
    svc = service(REPLAY + '[partitions.off]\nnodes = "n1"\nstate = "DOWN"\n')
    job_id, _ = svc.submit(job_spec(partition="off"), "")
    assert svc.get_job(job_id)["reason"] == model.REASON_PARTITION_DOWN


def test_enforce_part_limits_no_queues_an_oversized_job_and_any_refuses_it():
    svc = service()
    job_id, _ = svc.submit(job_spec(nodes=5), "")
    job = svc.get_job(job_id)
    assert job["state"] == model.PENDING and job["reason"] == model.REASON_PARTITION_NODE_LIMIT
    assert refusal(service(enforce="ANY"), nodes=5).slurm_error == "Node count specification invalid"
    refused = refusal(service(enforce="ALL"), time_limit_secs=7200)
    assert refused.slurm_error == "Requested time limit is invalid (missing or exceeds some limit)"


def test_a_list_of_partitions_is_refused_with_one_line():
    with pytest.raises(errors.InvalidArgument, match="a list of partitions is not supported"):
        service().submit(job_spec(partition="debug,long"), "")


def test_list_partitions_and_a_nodes_partitions():
    svc = service(REPLAY + '[partitions.both]\nnodes = "n2,n3"\nhidden = true\n')
    listing = svc.list_partitions()
    assert [(p.name, p.nodes, p.is_default, p.hidden) for p in listing] == [
        ("debug", ("n1", "n2"), True, False),
        ("long", ("n3", "n4"), False, False),
        ("both", ("n2", "n3"), False, True),
    ]
    assert [p.name for p in svc.list_partitions(["long"])] == ["long"]
    assert svc.get_node("n2")["partitions"] == ["debug", "both"]


def test_sbatch_prints_the_controllers_line_then_slurms_error_text(capsys):
    from spur_hpc.cli.runner import submit_failure
    from spur_hpc.wire.grpcwire import RpcError

    refused = RpcError("INVALID_ARGUMENT", "invalid partition specified: x", [(model.SLURM_ERROR_METADATA_KEY, "Oops")])
    assert str(submit_failure("sbatch", "Batch job submission failed", refused)) == "Batch job submission failed: Oops"
    assert capsys.readouterr().err == "sbatch: error: invalid partition specified: x\n"
    same = RpcError("INVALID_ARGUMENT", "Oops", [(model.SLURM_ERROR_METADATA_KEY, "Oops")])
    assert str(submit_failure("salloc", "Job submit/allocate failed", same)) == "Job submit/allocate failed: Oops"
    plain = RpcError("INVALID_ARGUMENT", "the job has no script")
    assert str(submit_failure("sbatch", "Batch job submission failed", plain)).endswith(": the job has no script")
    assert capsys.readouterr().err == ""


def test_the_listing_follows_nodes_that_come_or_declare_another_partition():
    parts = PartitionTable()
    s = state("n1")
    assert [p.name for p in parts.listing(s.nodes)] == ["default"]
    register(s, "n2")
    s.nodes["n2"]["partition"] = "gpu"
    assert [(p.name, p.nodes) for p in parts.listing(s.nodes)] == [("default", ("n1",)), ("gpu", ("n2",))]
    s.nodes["n1"]["partition"] = "gpu"
    assert [(p.name, p.nodes) for p in parts.listing(s.nodes)] == [("gpu", ("n1", "n2")), ("default", ())]


def test_squeue_leaves_out_jobs_of_hidden_partitions_unless_a_p_or_j(monkeypatch, capsys):
    from test_cli_support import fake_cluster

    from spur_hpc.cli import slurm
    from spur_hpc.proto import slurm_pb2 as pb

    def ids(*argv: str) -> str:
        assert slurm.squeue_main(["-h", "-o", "%i", *argv]) == 0
        return capsys.readouterr().out.replace("\n", " ").strip()

    with fake_cluster(monkeypatch) as cluster:
        cluster.add_job(1, state=pb.PENDING, spec=pb.JobSpec(name="a", user="alice", nodes=1, partition="debug"))
        cluster.add_job(2, state=pb.PENDING, spec=pb.JobSpec(name="b", user="alice", nodes=1, partition="secret"))
        assert ids() == "1 2"  # a controller without ListPartitions: nothing is known to be hidden
        cluster.state.partitions = [pb.Partition(name="debug"), pb.Partition(name="secret", hidden=True)]
        assert ids() == "1"
        assert ids("-a") == ids("-p", "secret,debug") == ids("-j", "1,2") == "1 2"


def test_sighup_reads_the_partitions_again_and_a_bad_file_keeps_them(tmp_path, secret, caplog):  # noqa: F811
    from spur_hpc.controller.daemon import ControllerDaemon

    daemon = ControllerDaemon()
    daemon.conf = load_text(tmp_path, controller_toml(secret) + REPLAY)
    daemon.service = service()
    path = Path(daemon.conf.path)
    path.write_text(controller_toml(secret) + REPLAY.replace('max_time = "60"', 'max_time = "60"\nstate = "DOWN"'))
    daemon.reload()
    assert daemon.service.list_partitions(["debug"])[0].state == "DOWN"
    path.write_text(controller_toml(secret) + '[partitions.x]\nstate = "OFF"\n')
    daemon.reload()
    assert daemon.service.list_partitions(["debug"])[0].state == "DOWN"
    assert (
        "[partitions.x] state: unknown value 'OFF'" in caplog.text and "the partitions stay as they were" in caplog.text
    )
