"""Accounting end to end: controllers + an agent + a real PostgreSQL; outages and leader kills lose nothing."""

from __future__ import annotations

import subprocess
import uuid

import grpc
import pytest

import pg
from agents import AgentProc
from agents import cleanup as cleanup_agents
from harness import BIN, wait_until
from spur_hpc.proto import slurm_pb2

pg_server, pg_database = pg.pg_server, pg.pg_database  # fixtures, bound by name


def accounting_section(url: str, password_file: str) -> str:
    return f'[accounting]\ndatabase_url = "{url}"\npassword_file = "{password_file}"\n'


@pytest.fixture
def agent_factory(tmp_path):
    made = []

    def make(cluster, name=None):
        agent = AgentProc(tmp_path / f"agent{len(made)}", cluster.hosts, name=name)
        made.append(agent)
        return agent.start()

    yield make
    for agent in made:
        agent.stop()
    cleanup_agents()


def submit(cluster, script: str) -> int:
    spec = slurm_pb2.JobSpec(name="acct", script=f"#!/bin/sh\n{script}\n", user="root", work_dir="/tmp")
    key = uuid.uuid4().hex

    def attempt():
        for m in cluster.running():
            try:
                return cluster.stub(m).SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=key),
                                                 timeout=5).job_id
            except grpc.RpcError:
                continue
        return None

    return wait_until(attempt, 20, "a controller to accept the job")


def job_state(cluster, job_id: int) -> slurm_pb2.Job | None:
    for m in cluster.running():
        try:
            return cluster.stub(m).GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)
        except grpc.RpcError:
            continue
    return None


def finished(cluster, ids) -> bool:
    jobs = [job_state(cluster, j) for j in ids]
    return all(j is not None and j.state not in (slurm_pb2.PENDING, slurm_pb2.RUNNING) for j in jobs)


def rows(database, cluster_id: str) -> dict[int, list[tuple]]:
    with database.admin_connect() as conn:
        found = conn.execute(
            "SELECT job_id, state, exit_code FROM spur_jobs WHERE cluster_id = %s ORDER BY job_id", (cluster_id,)
        ).fetchall()
    out: dict[int, list[tuple]] = {}
    for job_id, state, code in found:
        out.setdefault(job_id, []).append((state, code))
    return out


def test_jobs_appear_in_accounting_with_states_and_exit_codes(make_cluster, agent_factory, pg_database, pg_server):
    c = make_cluster(3, extra_sections=accounting_section(pg_database.url, pg_server.password_file))
    agent_factory(c)
    ok, failed = submit(c, "echo fine"), submit(c, "exit 3")
    wait_until(lambda: finished(c, [ok, failed]), 30, "both jobs to finish")
    leader = c.wait_leader()
    cluster_id = leader.status()["cluster_id"]
    wait_until(lambda: len(rows(pg_database, cluster_id)) == 2 and all(
        r[0][0] in ("COMPLETED", "FAILED") for r in rows(pg_database, cluster_id).values()), 15, "records")
    recorded = rows(pg_database, cluster_id)
    assert recorded[ok] == [("COMPLETED", 0)]
    assert recorded[failed] == [("FAILED", 3)]
    # Three controllers started together against an empty database: every migration ran once.
    with pg_database.admin_connect() as conn:
        versions = [v for (v,) in conn.execute("SELECT version FROM spur_schema_version").fetchall()]
    assert len(versions) == len(set(versions)) and versions
    # sacct's path: any controller answers from the database.
    follower = next(m for m in c.members if m is not leader)
    history = c.stub(follower).JobHistory(slurm_pb2.JobHistoryRequest(job_ids=[ok, failed]), timeout=10)
    assert {(j.job_id, j.state, j.exit_code) for j in history.jobs} == {
        (ok, slurm_pb2.COMPLETED, 0), (failed, slurm_pb2.FAILED, 3)}
    status = leader.status()["accounting"]
    assert status["enabled"] and status["connected"] and status["backlog"] == 0


@pytest.mark.parametrize("kill_leader", [False, True], ids=["outage", "outage-and-leader-killed"])
def test_database_outage_loses_and_duplicates_nothing(make_cluster, agent_factory, kill_leader):
    with pg.private_server() as server:
        database = server.create_database()
        c = make_cluster(3, extra_sections=accounting_section(database.url, server.password_file))
        agent_factory(c)
        before = [submit(c, "true")]
        wait_until(lambda: finished(c, before), 30, "the first job")
        server.stop("immediate")
        during = [submit(c, f"exit {i % 3}") for i in range(8)]
        wait_until(lambda: finished(c, during), 60, "jobs to run and finish during the outage")
        leader = c.wait_leader()
        wait_until(lambda: not leader.status()["accounting"]["connected"], 15, "the leader to notice the outage")
        assert leader.status()["accounting"]["backlog"] > 0
        if kill_leader:
            c.kill9(leader.index)
            leader = c.wait_leader(timeout=15, exclude=leader)
        server.start()
        cluster_id = leader.status()["cluster_id"]
        expected = before + during
        wait_until(lambda: set(expected) <= set(rows(database, cluster_id)) and all(
            r[0][0] not in ("PENDING", "RUNNING") for r in rows(database, cluster_id).values()), 30, "every record")
        recorded = rows(database, cluster_id)
        assert all(len(v) == 1 for v in recorded.values()), "a job was recorded twice"
        for i, job_id in enumerate(during):
            assert recorded[job_id] == [("COMPLETED" if i % 3 == 0 else "FAILED", i % 3)]
        wait_until(lambda: leader.status()["accounting"]["backlog"] == 0, 15, "the backlog to drain")


def test_a_schema_newer_than_the_code_refuses_to_start(make_cluster, pg_database, pg_server):
    from spur_hpc.accounting import SCHEMA_VERSION

    c = make_cluster(1, start=False, extra_sections=accounting_section(pg_database.url, pg_server.password_file))
    m = c.members[0]
    c.start()
    m.proc.stop()
    with pg_database.admin_connect() as conn:
        conn.execute("INSERT INTO spur_schema_version (version, description) VALUES (%s, 'from the future')",
                     (SCHEMA_VERSION + 1,))
    result = subprocess.run([str(BIN / "spurctld"), "--conf", str(m.conf_path)], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2
    assert f"schema version {SCHEMA_VERSION + 1}" in result.stderr and "newer release" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
