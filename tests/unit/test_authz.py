"""Who may do what and who sees what (controller/authz.py through the gRPC servicer): sacctmgr's AdminLevel from
the association store, [auth] private_data's "jobs" and "usage" as Slurm's PrivateData, the script/environment
rule whatever the setting, and spurctld's refusal of a category it does not know (agents and commands ignore it).

The callers are this host's daemon (uid 1), bin (uid 2) and sys (uid 3, made an Operator in the store), named by
`[auth] type = "none"` claims; the servicer runs on a real ControllerService over a ClusterState at WAL level 5.
"""

from __future__ import annotations

import pwd
from dataclasses import replace
from types import SimpleNamespace

import pytest
from test_dependencies import cluster, rec, spec
from test_dispatch_hold import _Raft

from spur_hpc import conf
from spur_hpc.auth import Identity
from spur_hpc.controller import associations, errors
from spur_hpc.controller.authz import Authorizer
from spur_hpc.controller.grpc_api import ControllerServicer
from spur_hpc.controller.service import ControllerService
from spur_hpc.proto import slurm_pb2

ALICE, BOB, OPS = (pwd.getpwuid(uid).pw_name for uid in (1, 2, 3))  # daemon, bin, sys on Debian


class Refused(Exception):
    def __init__(self, code, details) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def context(uid: int):
    def abort(code, details):
        raise Refused(code, details)

    return SimpleNamespace(invocation_metadata=lambda: (("spur-auth", f"none:{uid}:{uid}"),), abort=abort,
                           peer=lambda: "ipv4:127.0.0.1:1", set_trailing_metadata=lambda md: None)  # fmt: skip


def config(private_data: tuple[str, ...] = ()) -> conf.Config:
    base = conf.Config()
    return replace(base, auth=replace(base.auth, private_data=list(private_data)))


def make_operator(s, user: str, level: str = "Operator") -> None:
    """sacctmgr add user USER account=root adminlevel=LEVEL, as the store helper's RPC writes it."""
    key = associations.assoc_key("root", user)
    puts = [
        {"kind": "user", "key": user, "row": associations.new_user(user, "root", admin_level=level)},
        {"kind": "assoc", "key": key, "row": associations.new_assoc(90, "c", "root", user, parent="root")},
    ]
    assert s.apply(rec("assoc_apply", puts=puts, deletes=[]))["ok"]


@pytest.fixture
def world():
    """Two users' jobs (alice's with a secret in its script and environment) and an operator."""
    s = cluster(level=5)
    make_operator(s, OPS)
    jobs = {}
    for user, uid in ((ALICE, 1), (BOB, 2)):
        result = s.apply(rec("job_submit", key="", time=1.0, spec=spec(
            user=user, uid=uid, gid=uid, script=f"#!/bin/sh\n# TOKEN-{user}\nsleep 60\n",
            environment={"TOKEN": f"secret-{user}"}, hold=True)))  # fmt: skip
        jobs[user] = result["job_id"]
    service = ControllerService(
        SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30.0)),
        _Raft(s), lambda addr: None, clock=lambda: 1000.0,
    )  # fmt: skip

    def servicer(private_data: tuple[str, ...] = ()) -> ControllerServicer:
        node = SimpleNamespace(service=service, authz=Authorizer(config(private_data)), poke_scheduler=lambda: None)
        return ControllerServicer(node)

    return SimpleNamespace(state=s, jobs=jobs, servicer=servicer)


def who(uid: int, user: str) -> Identity:
    return Identity(uid, uid, user, verified=True)


def listed(servicer, uid: int, **request) -> list[int]:
    reply = servicer.ListJobs(slurm_pb2.ListJobsRequest(**request), context(uid))
    return sorted(j.job_id for j in reply.jobs)


# ------------------------------------------------------------------ levels


def test_the_store_gives_admin_levels_and_configuration_makes_administrators() -> None:
    authz = Authorizer(conf.Config())
    store = associations.default_store("c")
    store["users"][OPS] = associations.new_user(OPS, "root", admin_level="Operator")
    root, ops, alice = who(0, "root"), who(3, OPS), who(1, ALICE)
    assert [authz.level(who, store) for who in (root, ops, alice)] == ["Administrator", "Operator", "None"]
    assert authz.level(ops, None) == "None", "before WAL level 5 there is no store: only configured administrators"
    authz.require_level(ops, "Operator", "drain nodes", store)
    with pytest.raises(errors.PermissionDenied) as info:
        authz.require_level(ops, "Administrator", "change the association store", store)
    assert str(info.value) == (
        f"user {OPS} (uid 3) may not change the association store: needs AdminLevel Administrator "
        f"(sacctmgr modify user {OPS} set adminlevel=admin) or [auth] admins"
    )
    listed_admin = Authorizer(replace(conf.Config(), auth=replace(conf.Config().auth, admins=[ALICE])))
    assert listed_admin.level(alice, store) == "Administrator"


def test_an_operator_drains_a_node_and_cancels_anothers_job_a_user_is_refused_with_one_line(world) -> None:
    servicer = world.servicer()
    drain = slurm_pb2.DrainNodeRequest(name="n1", reason="maintenance")
    with pytest.raises(Refused) as info:
        servicer.DrainNode(drain, context(1))
    assert info.value.details == (
        f"user {ALICE} (uid 1) may not drain nodes: needs AdminLevel Operator "
        f"(sacctmgr modify user {ALICE} set adminlevel=operator) or [auth] admins"
    )
    assert not world.state.nodes["n1"]["drain"]
    servicer.DrainNode(drain, context(3))
    assert (world.state.nodes["n1"]["drain"], world.state.nodes["n1"]["drain_by"]) == (True, OPS)
    bobs = world.jobs[BOB]
    with pytest.raises(Refused) as info:
        servicer.CancelJob(slurm_pb2.CancelJobRequest(job_id=bobs), context(1))
    assert str(info.value.code) == "StatusCode.PERMISSION_DENIED" and "\n" not in info.value.details
    assert f"may not cancel job {bobs}: it belongs to {BOB}; needs AdminLevel Operator" in info.value.details
    assert world.state.jobs[bobs]["state"] == "PENDING"
    servicer.CancelJob(slurm_pb2.CancelJobRequest(job_id=bobs), context(3))
    assert world.state.jobs[bobs]["state"] == "CANCELLED"
    assert world.state.jobs[bobs]["cancelled_by_uid"] == 3


def test_an_operator_releases_an_administrators_hold_and_a_demoted_one_may_not(world) -> None:
    servicer = world.servicer()
    alices = world.jobs[ALICE]
    servicer.ReleaseJob(slurm_pb2.ReleaseJobRequest(job_id=alices), context(3))
    assert not world.state.jobs[alices]["held"]
    make_operator(world.state, OPS, level="None")
    with pytest.raises(Refused, match="may not hold job"):
        servicer.HoldJob(slurm_pb2.HoldJobRequest(job_id=alices), context(3))


# ------------------------------------------------------------------ private_data


def test_without_private_data_everyone_sees_every_job_but_not_anothers_script(world) -> None:
    servicer = world.servicer()
    both = sorted(world.jobs.values())
    assert listed(servicer, 1) == listed(servicer, 1, brief=True) == both
    assert listed(servicer, 1, users=[BOB]) == [world.jobs[BOB]], "squeue -u bob lists bob's jobs"
    bobs = servicer.GetJob(slurm_pb2.GetJobRequest(job_id=world.jobs[BOB]), context(1))
    assert bobs.spec.name and not bobs.spec.script and not bobs.spec.environment
    for uid in (2, 3, 0):  # the owner, an operator, root
        shown = servicer.GetJob(slurm_pb2.GetJobRequest(job_id=world.jobs[BOB]), context(uid))
        assert f"TOKEN-{BOB}" in shown.spec.script and shown.spec.environment["TOKEN"] == f"secret-{BOB}"
    every = servicer.ListJobs(slurm_pb2.ListJobsRequest(), context(3)).jobs
    assert all(j.spec.environment for j in every), "an operator reads every job's environment"
    mine = servicer.ListJobs(slurm_pb2.ListJobsRequest(), context(1)).jobs
    assert {j.job_id: bool(j.spec.environment) for j in mine} == {world.jobs[ALICE]: True, world.jobs[BOB]: False}


def test_private_jobs_hide_other_users_jobs_as_if_they_did_not_exist(world) -> None:
    servicer = world.servicer(("jobs",))
    alices, bobs = world.jobs[ALICE], world.jobs[BOB]
    assert listed(servicer, 1) == listed(servicer, 1, brief=True) == [alices]
    assert listed(servicer, 1, users=[BOB]) == [], "squeue -u bob as alice lists nothing"
    assert listed(servicer, 1, job_ids=[bobs]) == []
    with pytest.raises(Refused) as info:
        servicer.GetJob(slurm_pb2.GetJobRequest(job_id=bobs), context(1))
    assert str(info.value.code) == "StatusCode.NOT_FOUND"
    assert info.value.details == f"job {bobs} does not exist (or finished long ago)", "as an unknown id"
    for uid in (3, 0):
        assert listed(servicer, uid) == sorted(world.jobs.values()), "operators and administrators see all"
    assert listed(servicer, 2) == [bobs]


def test_private_jobs_narrow_sacct_to_the_callers_own_records(world) -> None:
    from spur_hpc.controller.service import copy_job

    records = [copy_job(j) for j in world.state.jobs.values()]  # what the database gives back, every user's
    history = slurm_pb2.JobHistoryRequest()
    for private_data, uid, wanted in ((("jobs",), 1, [world.jobs[ALICE]]), (("jobs",), 3, sorted(world.jobs.values())),
                                      ((), 1, sorted(world.jobs.values()))):  # fmt: skip
        servicer = world.servicer(private_data)
        servicer.node.accounting = SimpleNamespace(history=lambda cluster_id, **filters: records)
        assert sorted(j.job_id for j in servicer.JobHistory(history, context(uid)).jobs) == wanted, (private_data, uid)


def test_the_daemons_own_uid_is_an_administrator_as_slurms_slurmuser() -> None:
    authz = Authorizer(conf.Config())
    authz.daemon_uid = 64030  # spurctld run as a service user (slurm here) rather than root
    assert authz.level(who(64030, "slurm"), None) == "Administrator"
    assert authz.level(who(1, ALICE), None) == "None"


def test_a_coordinator_sees_and_acts_on_the_jobs_of_the_accounts_below_theirs(world) -> None:
    store = world.state.assoc
    puts = [
        {"kind": "account", "key": "chem", "row": associations.new_account("chem", "root", coordinators=[ALICE])},
        {"kind": "account", "key": "lab", "row": associations.new_account("lab", "chem")},
    ]
    assert world.state.apply(rec("assoc_apply", puts=puts, deletes=[]))["ok"]
    authz = Authorizer(config(("jobs", "usage")))
    visible = authz.job_filter(who(1, ALICE), store)
    assert visible({"user": BOB, "uid": 2, "account": "lab"}) and not visible({"user": BOB, "uid": 2, "account": "x"})
    assoc_visible = authz.assoc_filter(who(2, BOB), store)
    assert assoc_visible({"user": BOB, "account": "x"}) and not assoc_visible({"user": "", "account": "x"})
    assert not assoc_visible({"user": ALICE, "account": "x"})
    assert authz.assoc_filter(who(3, OPS), store) is None, "an operator sees every association"
    # A coordinator also acts on the jobs of those accounts (Slurm's job_signal), and on no other.
    bobs_lab_job = {"user": BOB, "uid": 2, "account": "lab"}
    assert authz.acts_on_job(who(1, ALICE), bobs_lab_job, store)
    assert not authz.acts_on_job(who(1, ALICE), {**bobs_lab_job, "account": "root"}, store)
    assert not authz.acts_on_job(who(2, BOB), {"user": ALICE, "uid": 1, "account": "chem"}, store)
    assert Authorizer(config(("jobs",))).assoc_filter(who(2, BOB), store) is None, "usage is not private"


def test_spurctld_refuses_an_unknown_category_and_agents_and_commands_ignore_it(tmp_path) -> None:
    from test_conf import agent_toml, controller_toml

    secret = tmp_path / "raft.secret"
    secret.write_text("s\n")
    secret.chmod(0o600)
    path = tmp_path / "spur.conf"
    path.write_text(controller_toml(secret, 'private_data = ["jobs", "accounts"]'))
    with pytest.raises(conf.ConfigError) as info:
        conf.load(str(path), role="controller")
    assert str(info.value) == (
        "[auth] private_data: unknown category 'accounts'; use 'jobs' or 'usage' (this release knows no other)"
    )
    assert conf.load(str(path), role="client").auth.private_data == ("jobs", "accounts")
    path.write_text(agent_toml('private_data = ["jobs", "accounts"]'))
    conf.load(str(path), role="agent")
    path.write_text(controller_toml(secret, 'private_data = ["jobs", "usage"]'))
    assert conf.load(str(path), role="controller").auth.private_data == ("jobs", "usage")
    assert not conf.Config().auth.private_data, "Slurm's default: everything visible"
