"""priority/multifactor (controller/priority.py) and the state machine's side of it: the first priority carried by
job_submit, job_priorities, usage charged when a job ends, and every member ordering the queue alike."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from spur_hpc import conf as C
from spur_hpc.controller import associations as A
from spur_hpc.controller import fairshare as F
from spur_hpc.controller import grpc_api, wal
from spur_hpc.controller import priority as P
from spur_hpc.controller.partitions import PartitionTable
from spur_hpc.controller.scheduler import pending_in_order
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.state import ClusterState
from spur_hpc.proto import slurm_pb2

WEIGHTS = {"age": 1000, "fairshare": 10000, "job_size": 1000, "partition": 1000, "qos": 2000, "assoc": 0}


def settings(**over) -> P.Settings:
    text = '[scheduler]\npriority_type = "multifactor"\n' + "".join(
        f"priority_weight_{k} = {v}\n" for k, v in {**WEIGHTS, **over}.items()
    )
    return P.settings(C.parse(text))


def rec(op, **kw):
    return wal.make_record(op, **kw)


def spec(user="alice", account="phys", **kw):
    base = {"name": "j", "script": "true", "user": user, "uid": 1, "gid": 1, "work_dir": "/tmp", "nodes": 1,
            "tasks": 1, "cpus_per_task": 1, "memory_mb": 0, "time_limit_secs": 0, "partition": "default",
            "account": account}  # fmt: skip
    base.update(kw)
    return base


def cluster() -> ClusterState:
    """Level 5, two 4-CPU nodes, account phys with users alice and bob (one share each), QOS normal and high."""
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id="id", members=["a:1"], wal_level=5))
    for name in ("n1", "n2"):
        s.apply(rec("node_register", name=name, address=f"{name}:1", cpus=4, memory_mb=1000, version="1", build="b",
                    partition="default", running=[], time=1.0))  # fmt: skip
    puts = [
        {"kind": "account", "key": "phys", "row": A.new_account("phys", "root")},
        {"kind": "assoc", "key": A.assoc_key("phys"), "row": A.new_assoc(3, "c", "phys", parent="root")},
        {"kind": "qos", "key": "high", "row": A.new_qos("high", 9, priority=100)},
    ]
    for i, user in enumerate(("alice", "bob")):
        puts.append({"kind": "user", "key": user, "row": A.new_user(user, "phys")})
        row = A.new_assoc(4 + i, "c", "phys", user, parent="phys", qos=["normal", "high"])
        puts.append({"kind": "assoc", "key": A.assoc_key("phys", user), "row": row})
    assert s.apply(rec("assoc_apply", puts=puts, deletes=[]))["ok"]
    return s


def submit(s, conf, now, **kw):
    sp = spec(**kw)
    value = P.new_job_priority(s, sp, now, None, conf)
    result = s.apply(rec("job_submit", spec=sp, key="", time=now, priority=value))
    return result["job_id"]


def test_formula_units_each_factor_times_its_weight_less_nice():
    conf = settings()
    s = cluster()
    # half the cluster's CPUs on one of two nodes: job size (1/2 + 4/8) / 2 = 0.5; QOS high is the highest: 1
    job = {"spec": spec(tasks=4, qos="high", nice=7), "eligible_time": 0.0, "submit_time": 0.0}
    ctx = P.Context(s, 7 * 86400 / 2, None, conf)
    f = P.factors(job, ctx)
    assert f["age"] == pytest.approx(0.5)  # half of priority_max_age (7-0)
    assert f["job_size"] == pytest.approx(0.5)
    assert f["qos"] == 1.0 and f["assoc"] == 0.0 and f["partition"] == 0.0  # no partition table: no factor
    assert f["fairshare"] == 1.0  # nobody has used anything: every user ties first
    assert P.job_priority(job, ctx) == int(500 + 10000 + 500 + 2000 - 7)
    favor = P.Context(s, 0.0, None, settings())
    favor_small = P.Context(s, 0.0, None, P.Settings(**{**conf.__dict__, "favor_small": True}))
    assert P.factors(job, favor)["job_size"] + P.factors(job, favor_small)["job_size"] == pytest.approx(1.0)
    assert P.combine(dict.fromkeys(P.FACTORS, 0.0), conf.weights, 50) == 1  # never below 1 (0 is held)


def test_partition_factor_is_its_job_factor_over_the_highest():
    text = '[scheduler]\npriority_type = "multifactor"\npriority_weight_partition = 1000\n'
    text += '[partitions.a]\nnodes = "n1"\npriority_job_factor = 10\n[partitions.b]\nnodes = "n2"\n'
    parsed = C.parse(text)
    conf, parts = P.settings(parsed), PartitionTable.from_conf(parsed)
    s = cluster()
    ctx = P.Context(s, 0.0, parts, conf)
    assert P.factors({"spec": spec(partition="a")}, ctx)["partition"] == 1.0
    assert P.factors({"spec": spec(partition="b")}, ctx)["partition"] == pytest.approx(0.1)


def test_a_user_who_used_the_cluster_gets_a_lower_priority_and_usage_halves():
    conf = settings(fairshare=10000, age=0, job_size=0, partition=0, qos=0)
    s = cluster()
    s.apply(rec("job_priorities", priorities=[], half_life=3600.0, time=1.0))
    used = submit(s, conf, 10.0, user="alice", tasks=4)
    assert s.apply(rec("job_start", job_id=used, nodes=["n1"], attempt=1, time=20.0))["ok"]
    s.apply(rec("job_end", job_id=used, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=80.0))
    key = A.assoc_key("phys", "alice")
    assert s.assoc["usage"][key] == [240.0, 80.0]  # 4 CPUs for 60 s, charged at the record's time
    assert s.assoc["usage"][A.assoc_key("root")] == [240.0, 80.0]
    assert F.usage_at(s.assoc, key, 80.0 + 3600.0) == pytest.approx(120.0)  # one half-life later: half
    a = submit(s, conf, 100.0, user="alice")
    b = submit(s, conf, 100.0, user="bob")
    assert s.jobs[b]["priority"] > s.jobs[a]["priority"]
    assert pending_in_order(s) == [b, a]  # the scheduler takes bob's first though alice submitted first


def test_running_jobs_are_charged_each_period_and_the_rest_at_their_end():
    conf = settings()
    s = cluster()
    job_id = submit(s, conf, 0.0, user="alice", tasks=2)
    s.apply(rec("job_start", job_id=job_id, nodes=["n1"], attempt=1, time=100.0))
    key = A.assoc_key("phys", "alice")
    s.apply(rec("job_priorities", priorities=[], half_life=0.0, time=130.0, charge_running=True))
    assert s.assoc["usage"][key] == [60.0, 130.0]  # 2 CPUs for 30 s, while it runs
    s.apply(rec("job_priorities", priorities=[], half_life=0.0, time=130.0, charge_running=False))
    s.apply(rec("job_end", job_id=job_id, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=160.0))
    assert s.assoc["usage"][key] == [120.0, 160.0]  # the whole run once: 2 CPUs for 60 s


def test_job_priorities_applies_to_pending_jobs_and_holds_keep_zero():
    conf = settings()
    s = cluster()
    j1 = submit(s, conf, 10.0)
    j2 = submit(s, conf, 10.0, hold=True)
    assert s.jobs[j2]["priority"] == 0 and s.jobs[j2]["mf_priority"] > 0
    result = s.apply(rec("job_priorities", priorities=[[j1, 777], [j2, 888], [999, 5]], half_life=60.0, time=20.0))
    assert result == {"ok": True, "changed": 1}
    assert s.jobs[j1]["priority"] == 777 and s.jobs[j2]["priority"] == 0
    assert s.assoc[F.HALF_LIFE_KEY] == 60.0
    s.apply(rec("job_release", job_id=j2))
    assert s.jobs[j2]["priority"] == 888  # released: its last multifactor priority, not a basic one


def test_changed_priorities_lists_only_what_moved():
    conf = settings(age=100000)
    s = cluster()
    j1 = submit(s, conf, 0.0)
    assert P.changed_priorities(s, 0.0, None, conf) == []
    later = P.changed_priorities(s, 3600.0, None, conf)
    assert [j for j, _ in later] == [j1] and later[0][1] > s.jobs[j1]["priority"]


def test_every_member_orders_alike_after_the_same_records():
    conf = settings(age=1000, fairshare=10000)
    records = []
    leader = cluster()

    def step(record):
        records.append(record)
        return leader.apply(record)

    for i, user in enumerate(["alice", "bob", "alice", "bob", "alice"]):
        sp = spec(user=user, tasks=1 + i % 3)
        step(rec("job_submit", spec=sp, key="", time=10.0 + i, priority=P.new_job_priority(leader, sp, 10.0, None,
                                                                                          conf)))  # fmt: skip
    step(rec("job_start", job_id=1, nodes=["n1"], attempt=1, time=20.0))
    step(rec("job_end", job_id=1, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=500.0))
    step(rec("job_priorities", priorities=P.changed_priorities(leader, 600.0, None, conf), half_life=600.0, time=1.0))
    follower = cluster()
    for record in records:
        follower.apply(record)
    assert follower.fingerprint() == leader.fingerprint()
    assert pending_in_order(follower) == pending_in_order(leader)
    restored = pickle.loads(pickle.dumps(leader))
    assert pending_in_order(restored) == pending_in_order(leader) and restored.assoc == leader.assoc


def test_basic_is_the_default_and_keeps_submission_order():
    assert P.settings(C.parse("")).multifactor is False
    s = cluster()
    a = s.apply(rec("job_submit", spec=spec(), key="", time=1.0))["job_id"]
    b = s.apply(rec("job_submit", spec=spec(user="bob"), key="", time=2.0))["job_id"]
    assert "mf_priority" not in s.jobs[a] and pending_in_order(s) == [a, b]


def test_config_bounds_say_what_is_wrong():
    with pytest.raises(C.ConfigError, match=r"\[scheduler\] priority_calc_period: '0' is no period"):
        C.validate(C.parse('[scheduler]\npriority_calc_period = "0"'), None)
    with pytest.raises(C.ConfigError, match="priority_type: unknown value 'fair'; use basic or multifactor"):
        C.parse('[scheduler]\npriority_type = "fair"')
    with pytest.raises(C.ConfigError, match="priority_weight_qos: -1 is out of range"):
        C.parse("[scheduler]\npriority_weight_qos = -1")
    assert P.settings(C.parse('[scheduler]\npriority_calc_period = "0:02"')).calc_period_secs == 2


# ------------------------------------------------------------------ sprio and sshare against Slurm's captures

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05-priority"
CAPTURE_TIME = 1_000_000.0


def capture_cluster():
    """The capture session's state (tools/slurm_capture/priority_session.py) at the time of its sprio and sshare:
    two 4-CPU nodes in partition debug, daemon and nobody in account phys, daemon's 227 CPU seconds of usage,
    QOS high (priority 100), a root job running on both nodes and five pending jobs (ids 3 to 7)."""
    text = (
        '[scheduler]\npriority_type = "multifactor"\n'
        + "".join(f"priority_weight_{k} = {v}\n" for k, v in WEIGHTS.items())
        + '[partitions.debug]\nnodes = "n[1-2]"\ndefault = true\n'
    )
    config = C.parse(text)
    s = ClusterState()
    s.apply(rec("cluster_init", name="capture", cluster_id="id", members=["a:1"], wal_level=5))
    for name in ("n1", "n2"):
        s.apply(rec("node_register", name=name, address=f"{name}:1", cpus=4, memory_mb=4096, version="1",
                    build="b", partition="debug", running=[], time=1.0))  # fmt: skip
    puts = [
        {"kind": "account", "key": "phys", "row": A.new_account("phys", "root")},
        {"kind": "assoc", "key": A.assoc_key("phys"), "row": A.new_assoc(3, "capture", "phys", parent="root")},
        {"kind": "qos", "key": "high", "row": A.new_qos("high", 2, priority=100)},
    ]
    for i, user in enumerate(("daemon", "nobody")):
        puts.append({"kind": "user", "key": user, "row": A.new_user(user, "phys")})
        row = A.new_assoc(4 + i, "capture", "phys", user, parent="phys", qos=["normal", "high"])
        puts.append({"kind": "assoc", "key": A.assoc_key("phys", user), "row": row})
    assert s.apply(rec("assoc_apply", puts=puts, deletes=[]))["ok"]
    F.charge(s.assoc, A.assoc_key("phys", "daemon"), 227.0, CAPTURE_TIME)
    service = ControllerService(config, FakeRaft(s), lambda _addr: None, clock=lambda: CAPTURE_TIME)
    submits = [
        ("root", {"tasks": 8, "nodes": 2}),  # 1: the blocker (runs)
        ("root", {}),  # 2: cancelled (the capture's job 2 was daemon's, cancelled after its usage was charged)
        ("nobody", {"tasks": 2}), ("daemon", {"tasks": 2}), ("nobody", {"nice": 100}),
        ("daemon", {"tasks": 8, "qos": "high"}), ("root", {}),
    ]  # fmt: skip
    for user, extra in submits:
        sp = spec(user=user, account="root" if user == "root" else "phys", partition="debug", **extra)
        value = P.new_job_priority(s, sp, CAPTURE_TIME, service.partitions, service.priority)
        s.apply(rec("job_submit", spec=sp, key="", time=CAPTURE_TIME, priority=value))
    started = s.apply(rec("job_start", job_id=1, nodes=["n1", "n2"], attempt=1, time=CAPTURE_TIME))
    assert started["ok"], started
    s.apply(rec("job_cancel", job_id=2, time=CAPTURE_TIME))
    return service


class FakeRaft:
    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def read(self, fn):
        return fn(self.state)


class FakeClient:
    """The controller's answers, made by the real service and reply builders over capture_cluster()'s state."""

    service = None
    caller = "root"

    def call(self, method, request=None, write=False):
        request = request or {}
        if method == "ListPriorities":
            rows = self.service.list_priorities(request.get("job_ids", []), request.get("users", []))
            return grpc_api.priorities_reply(rows, self.service.priority.weights)
        if method == "ListShares":
            users = request.get("users") or [self.caller]
            rows = self.service.list_shares(users, request.get("accounts", []), request.get("all_users", False))
            return grpc_api.shares_reply(rows)
        if method == "ListJobs":
            return slurm_pb2.ListJobsReply()
        if method == "GetClusterInfo":
            return slurm_pb2.ClusterInfo(cluster_name="capture")
        raise AssertionError(method)


@pytest.fixture
def fake_controller(monkeypatch):
    from spur_hpc.cli import controller

    FakeClient.service = capture_cluster()
    monkeypatch.setattr(controller, "ControllerClient", FakeClient)
    return FakeClient


SPRIO = ["016-sprio", "017-sprio-l", "018-sprio-n", "019-sprio-w", "020-sprio-h", "021-sprio-j", "022-sprio-u",
         "023-sprio-o", "024-sprio-format", "025-sprio-l-n", "026-sprio-j-unknown", "007-sprio-empty"]  # fmt: skip
SSHARE = ["029-sshare", "030-sshare-a", "031-sshare-l", "032-sshare-a-l", "033-sshare-u", "034-sshare-u-daemon-nobody",
          "035-sshare-A", "036-sshare-A-a", "037-sshare-P", "038-sshare-p", "039-sshare-n", "040-sshare-o",
          "041-sshare-o-widths", "042-sshare-A-unknown", "044-nobody-sshare"]  # fmt: skip


@pytest.mark.parametrize("name", SPRIO + SSHARE)
def test_sprio_and_sshare_print_what_slurm_printed(name, fake_controller, capsys, monkeypatch):
    import json
    import shlex

    from spur_hpc.cli import sprio, sshare

    captured = json.loads((GOLDEN / f"{name}.json").read_text())
    command = captured["resolved"]
    if command.startswith("as:"):
        _, fake_controller.caller, command = command.split(":", 2)
    argv = shlex.split(command)
    if name == "007-sprio-empty":  # before any job was submitted
        fake_controller.service.raft.state.jobs.clear()
    main = {"sprio": sprio.main, "sshare": sshare.main}[argv[0]]
    assert main(argv[1:]) == captured["rc"]
    out = capsys.readouterr()
    expected = captured["stdout"]
    if name == "024-sprio-format":  # %c: Slurm 22.05 prints (null) for its own cluster, Spur the cluster's name
        expected = expected.replace("|(null)|", "|capture|")
    assert out.out == expected
    assert out.err == captured["stderr"]


def test_sprio_under_basic_says_what_slurm_says(monkeypatch, capsys):
    from spur_hpc.cli import controller, sprio

    class Basic(FakeClient):
        def call(self, method, request=None, write=False):
            return grpc_api.priorities_reply(None, {})

    monkeypatch.setattr(controller, "ControllerClient", Basic)
    assert sprio.main([]) == 1
    assert capsys.readouterr().err == sprio.BASIC
    assert sprio.BASIC.splitlines() == [
        "You are not running a supported priority plugin",
        "(priority/basic).",
        "Only 'priority/multifactor' is supported.",
    ]


def test_scontrol_show_config_prints_slurms_priority_keys():
    import json

    from spur_hpc.cli import jobcontrol

    text = '[scheduler]\npriority_type = "multifactor"\npriority_calc_period = "1"\n' + "".join(
        f"priority_weight_{k} = {v}\n" for k, v in WEIGHTS.items()
    )
    lines = [f"{k:<{jobcontrol.CONFIG_KEY_WIDTH}} = {v}" for k, v in jobcontrol.priority_pairs(C.parse(text).scheduler)]
    captured = json.loads((GOLDEN / "027-scontrol-show-config.json").read_text())["stdout"].splitlines()
    # PriorityParameters and the site factor plugin's keys have no Spur equivalent (docs/cli.md)
    slurm = [line for line in captured if line.startswith("Priority") and "Parameters" not in line
             and "SiteFactor" not in line]  # fmt: skip
    assert lines == slurm
    assert jobcontrol.priority_pairs(C.parse("").scheduler) == [("PriorityType", "priority/basic")]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["sprio", "-j", "x"], "sprio: error: invalid job id 'x': job ids are positive numbers"),
        (["sprio", "extra"], "sprio: error: unexpected argument 'extra'; sprio takes options only"),
        (["sshare", "-o", "Nope"], 'sshare: error: Invalid field requested: "Nope"; sshare --helpformat lists'),
        (["sshare", "-o", "User%x"], "sshare: error: -o User%x: the width after % must be a number, like User%20"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(argv, line, fake_controller, capsys):
    from spur_hpc.cli import slurm

    assert getattr(slurm, f"{argv[0]}_main")(argv[1:]) == 1
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_sshare_helpformat_and_users_only(fake_controller, capsys):
    from spur_hpc.cli import sshare

    assert sshare.main(["-e"]) == 0
    assert capsys.readouterr().out == (  # Slurm 22.05's sshare -e, byte for byte
        "Account           Cluster           EffectvUsage      FairShare        \n"
        "GrpTRESMins       GrpTRESRaw        ID                LevelFS          \n"
        "NormShares        NormUsage         Partition         RawShares        \n"
        "RawUsage          TRESRunMins       User             \n"
    )
    assert sshare.main(["-a", "-U", "-n", "-P", "-o", "User,FairShare"]) == 0
    assert capsys.readouterr().out == "root|1.000000\ndaemon|0.333333\nnobody|0.666667\n"

