"""The association store through gRPC on one 3-controller cluster with [accounting] enforce = ["qos"] and a real
PostgreSQL: sacctmgr's changes (ModifyAssociations, ListAssociations), a job's default account and QOS, the
refusals of enforcement with Slurm's words, the store across a leader kill, the database's copy."""

from __future__ import annotations

import os
import subprocess
import uuid

import grpc
import pytest

import pg
from harness import BIN, ControllerCluster, next_ip_base, wait_until
from spur_hpc.accounting import assocstore
from spur_hpc.model import SLURM_ERROR_METADATA_KEY
from spur_hpc.proto import slurm_pb2

pg_server = pg.pg_server  # the session's server, bound by name

NOBODY = (65534, 65534)


@pytest.fixture(scope="module")
def env(tmp_path_factory, pg_server):
    database = pg_server.create_database()
    sections = (
        f'[accounting]\ndatabase_url = "{database.url}"\npassword_file = "{pg_server.password_file}"\n'
        'enforce = ["qos"]\n\n[partitions.debug]\nnodes = "sn[1-2]"\ndefault = true\n'
    )
    cluster = ControllerCluster(tmp_path_factory.mktemp("assoc"), n=3, ip_base=next_ip_base(3), extra_sections=sections)
    cluster.start()
    yield cluster, database
    cluster.stop()


def as_user(uid_gid):
    return (("spur-auth", f"none:{uid_gid[0]}:{uid_gid[1]}"),)


def call(cluster, method, request, who=(0, 0)):
    """The RPC on the leader (retried while a new one is elected)."""
    leader = cluster.wait_leader(timeout=30)
    return getattr(cluster.stub(leader), method)(request, timeout=10, metadata=as_user(who))


def sacctmgr(cluster, verb, entity, names=(), where=None, set_=None, who=(0, 0), dry_run=False):
    request = slurm_pb2.ModifyAssociationsRequest(
        verb=verb, entity=entity, names=list(names), where=where or {}, set=set_ or {}, dry_run=dry_run
    )
    return call(cluster, "ModifyAssociations", request, who)


def submit(cluster, who, user, **fields):
    spec = slurm_pb2.JobSpec(
        name="assoc", script="#!/bin/sh\ntrue\n", user=user, uid=who[0], gid=who[1], work_dir="/tmp", **fields
    )
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=uuid.uuid4().hex)
    job_id = call(cluster, "SubmitJob", request, who).job_id
    return call(cluster, "GetJob", slurm_pb2.GetJobRequest(job_id=job_id))


def refusal(cluster, who, user, **fields) -> tuple[grpc.StatusCode, str, str]:
    with pytest.raises(grpc.RpcError) as info:
        submit(cluster, who, user, **fields)
    trailing = dict(info.value.trailing_metadata() or ())
    return info.value.code(), info.value.details(), trailing.get(SLURM_ERROR_METADATA_KEY, "")


def listing(cluster, member=None) -> dict:
    member = member or cluster.wait_leader(timeout=30)
    reply = cluster.stub(member).ListAssociations(slurm_pb2.ListAssociationsRequest(), timeout=10)
    return {
        "qos": {q.name: q for q in reply.qos},
        "accounts": {a.name: a for a in reply.accounts},
        "users": {u.name: u for u in reply.users},
        "assocs": {f"{a.account}|{a.user}|{a.partition}": a for a in reply.associations},
    }


def test_store_changes_defaults_enforcement_failover_and_database_copy(env):
    cluster, database = env
    assert set(listing(cluster)["accounts"]) == {"root"}  # a new cluster, as a new slurmdbd's

    reply = sacctmgr(cluster, "add", "account", ["phys"], set_={"description": "Physics", "grptres": "cpu=8,mem=4G"})
    assert (list(reply.affected), reply.changed) == (["phys"], True)
    sacctmgr(cluster, "add", "qos", ["high"], set_={"priority": "100", "maxwall": "2:00:00"})
    dry = sacctmgr(cluster, "add", "user", ["nobody"], set_={"account": "phys"}, dry_run=True)
    assert not dry.changed and "nobody" not in listing(cluster)["users"]
    added = sacctmgr(cluster, "add", "user", ["nobody"], set_={"account": "phys"})
    assert list(added.affected) == ["U = nobody    A = phys       C = test      "]
    again = sacctmgr(cluster, "add", "user", ["nobody"], set_={"account": "phys"})
    assert (again.changed, again.message) == (False, "Nothing new added.")

    store = listing(cluster)
    assert store["users"]["nobody"].default_account == "phys"
    assert dict(store["assocs"]["phys||"].grp_tres) == {"cpu": 8, "mem": 4096}
    assert store["qos"]["high"].max_wall_secs == 7200

    # Only operators and administrators change the store; the refusal says what is lacking.
    with pytest.raises(grpc.RpcError) as info:
        sacctmgr(cluster, "add", "account", ["mine"], who=NOBODY)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "AdminLevel" in info.value.details()
    # An Operator changes any object (as in slurmdbd), but only an Administrator makes administrators.
    sacctmgr(cluster, "modify", "user", ["nobody"], set_={"adminlevel": "Operator"})
    assert list(sacctmgr(cluster, "add", "account", ["ops"], who=NOBODY).affected) == ["ops"]
    with pytest.raises(grpc.RpcError) as info:
        sacctmgr(cluster, "modify", "user", ["nobody"], set_={"adminlevel": "Admin"}, who=NOBODY)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED and "Administrator" in info.value.details()
    sacctmgr(cluster, "delete", "account", ["ops"], who=NOBODY)
    sacctmgr(cluster, "modify", "user", ["nobody"], set_={"adminlevel": "None"})
    with pytest.raises(grpc.RpcError) as info:
        sacctmgr(cluster, "delete", "account", ["root"])
    assert (info.value.code(), info.value.details()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "You are not allowed to remove the root account.",
    )
    nothing = sacctmgr(cluster, "delete", "account", ["nosuch"])
    assert (nothing.changed, nothing.message, list(nothing.affected)) == (False, "Nothing deleted", [])

    # Submit: no -A is the user's default account, no --qos the association's default QOS.
    spec = submit(cluster, (0, 0), "root").spec
    assert (spec.account, spec.qos) == ("root", "normal")
    first = submit(cluster, NOBODY, "nobody")  # pends: the cluster has no node
    assert (first.spec.account, first.spec.qos) == ("phys", "normal")
    # enforce = ["qos"] implies associations: a foreign account, then a QOS the association may not use
    code, details, slurm_error = refusal(cluster, NOBODY, "nobody", account="root")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no association with account root" in details
    assert slurm_error == "Invalid account or account/partition combination specified"
    code, details, slurm_error = refusal(cluster, NOBODY, "nobody", qos="high")
    assert "QOS high is not one" in details and slurm_error == "Invalid qos specification"
    # sbatch prints the controller's line, then Slurm's (root has no association with phys)
    env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
    done = subprocess.run(
        [str(BIN / "sbatch"), "-A", "phys", "--wrap", "true"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "sbatch: error: user root has no association with account phys in partition debug and the cluster enforces "
        "associations; ask an administrator to add one (sacctmgr add user root account=ACCOUNT) or name one of your "
        "accounts with -A",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
    ]
    sacctmgr(cluster, "modify", "user", where={"name": "nobody"}, set_={"qos+": "high"})
    second = submit(cluster, NOBODY, "nobody", qos="high")
    assert second.spec.qos == "high"

    # The database's copy follows the store (the leader writes it whole when it changed).
    def copied():
        with database.admin_connect() as conn:
            cluster_id = conn.execute("SELECT cluster_id FROM spur_assoc_copies").fetchone()
            if cluster_id is None:
                return None
            rows = assocstore.read_store(conn, cluster_id[0])
        return rows if rows["assocs"].get("phys|nobody|", {}).get("qos") == ["normal", "high"] else None

    rows = wait_until(copied, 20, "the database's copy of the store")
    assert set(rows["accounts"]) == {"root", "phys"} and set(rows["users"]) == {"root", "nobody"}
    assert rows["assocs"]["phys||"]["grp_tres"] == {"cpu": 8, "mem": 4096}
    assert rows["qos"]["high"]["priority"] == 100

    # The store is replicated state: the next leader holds the same, and takes changes.
    before = listing(cluster)
    leader = cluster.wait_leader()
    cluster.kill9(leader.index)
    new = cluster.wait_leader(timeout=30, exclude=leader)
    after = listing(cluster, new)
    assert {k: sorted(v) for k, v in after.items()} == {k: sorted(v) for k, v in before.items()}
    assert after["assocs"]["phys|nobody|"] == before["assocs"]["phys|nobody|"]
    # slurmdbd refuses to delete what a pending or running job uses
    with pytest.raises(grpc.RpcError) as info:
        sacctmgr(cluster, "delete", "user", ["nobody"])
    assert f"Job(s) active, cancel job(s) before remove: job {first.job_id}, {second.job_id}" in info.value.details()
    for job in (first, second):
        call(cluster, "CancelJob", slurm_pb2.CancelJobRequest(job_id=job.job_id))
    assert list(sacctmgr(cluster, "delete", "user", ["nobody"]).affected) == ["nobody"]
    assert "nobody" not in listing(cluster, new)["users"]


def test_database_copy_waits_out_an_outage_and_never_goes_back():
    """The writer's side alone: an outage only delays the copy; an older copy never replaces a newer one."""
    from spur_hpc.accounting import AccountingWriter
    from spur_hpc.controller import associations as A
    from spur_hpc.controller import assocplan

    store = A.default_store("c1")
    puts, deletes, _ = assocplan.plan_change(store, "add", "account", ["phys"], {}, {"fairshare": "5"}, "c1")
    newer = {**store, **{k: dict(v) for k, v in store.items() if isinstance(v, dict)}}
    assert A.apply_change(newer, puts, deletes) is None
    with pg.private_server() as server:
        database = server.create_database()
        writer = AccountingWriter(database.url, database.password, "cid-1", retry_interval_secs=0)
        assert writer.copy_associations(store, applied=10)
        server.stop("immediate")
        assert not writer.copy_associations(newer, applied=20)  # returns at once; the loop retries next pass
        assert writer.health()["connected"] is False
        server.start()
        assert writer.copy_associations(newer, applied=20)
        assert writer.copy_associations(store, applied=15)  # a late copy of an older state: refused, not an error
        with database.admin_connect() as conn:
            rows = assocstore.read_store(conn, "cid-1")
        assert set(rows["accounts"]) == {"root", "phys"} and rows["assocs"]["phys||"]["shares"] == 5
        assert rows["users"]["root"]["admin_level"] == "Administrator" and set(rows["qos"]) == {"normal"}
        writer.close()
