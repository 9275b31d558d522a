"""spur.cluster against live local clusters: real controllers on 127.0.1.N, a real spurd, real ansible-playbook.

Every state-changing module runs four times (check mode, real, check again, real again); the last two must
report no change.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from ansible_collections.spur.cluster.plugins.modules import (
    spur_cluster_health,
    spur_controller_info,
    spur_node_info,
    spur_preflight,
    spur_upgrade_plan,
    spur_wal_level,
)
from collection_helpers import run_module

from agents import AgentProc, cleanup
from harness import BIN, ControllerCluster, Proc, wait_until
from spur_hpc.controller.wal import MAX_WAL_LEVEL
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

FOUR = [True, False, True, False]  # check mode, real, check again, real again
CHANGED = [True, True, False, False]  # what those four runs report


def probes(cluster: ControllerCluster) -> list[str]:
    return [m.probe_url for m in cluster.members]


def names(cluster: ControllerCluster) -> list[str]:
    return [f"ctl-{m.index}" for m in cluster.members]


def connection(cluster: ControllerCluster) -> dict:
    return {"controllers": probes(cluster), "controller_names": names(cluster), "timeout": 3}


def four_times(module: str, args: dict, prefix: str) -> list[dict]:
    return [
        {"name": f"{prefix} {i}", module: args, "check_mode": check, "register": f"{prefix}_{i}"}
        for i, check in enumerate(FOUR)
    ]


@pytest.fixture
def agent(cluster, tmp_path):
    proc = AgentProc(tmp_path / "agent", cluster.hosts, heartbeat=0.5).start()
    yield proc
    proc.stop()


# ------------------------------------------------------------------ read-only modules


def test_controller_info_and_health_on_a_live_cluster(cluster):
    leader = cluster.wait_leader()
    result = run_module(spur_controller_info, connection(cluster))
    assert result["one_leader"] is True and result["leader"] == f"ctl-{leader.index}"
    assert result["members"] == sorted(cluster.peers)
    assert all(c["reachable"] and c["build"] and c["version"] for c in result["controllers"])
    health = run_module(spur_cluster_health, dict(connection(cluster), stable_for=1, wait_timeout=30))
    assert health["healthy"] is True and health["leader"] == f"ctl-{leader.index}"
    # a follower stopped: info still answers, health fails naming it
    follower = next(m for m in cluster.members if m is not leader)
    follower.proc.stop()
    result = run_module(spur_controller_info, connection(cluster))
    assert "failed" not in result
    down = next(c for c in result["controllers"] if c["name"] == f"ctl-{follower.index}")
    assert down["reachable"] is False and down["error"]
    health = run_module(spur_cluster_health, dict(connection(cluster), stable_for=0, wait_timeout=1))
    assert health["failed"] and f"controller ctl-{follower.index} does not answer" in health["msg"]


def test_upgrade_plan_and_preflight_on_a_live_cluster(cluster, agent):
    leader = cluster.wait_leader()
    plan = run_module(
        spur_upgrade_plan,
        dict(connection(cluster), target_build="next", agents=[{"name": "host-a", "probe": agent.probe_url}]),
    )
    assert plan["controllers"]["order"][-1] == f"ctl-{leader.index}"
    assert plan["controllers"]["order_source"] == "leader_last"
    assert plan["agents"]["batches"] == [["host-a"]]
    assert plan["agent_observations"][0]["node"] == agent.name
    build = plan["cluster"]["controllers"][0]["build"]
    same = run_module(spur_upgrade_plan, dict(connection(cluster), target_build=build))
    assert same["up_to_date"] is True
    members = [m.raft_addr for m in cluster.members]
    ok = run_module(spur_preflight, dict(connection(cluster), members=members, target_max_wal_level=MAX_WAL_LEVEL))
    assert ok["passed"] is True, ok.get("msg")
    refused = run_module(spur_preflight, dict(connection(cluster), members=members[:2]))
    assert refused["failed"] and "committed membership" in refused["msg"] and "set wipe to override" in refused["msg"]


def test_node_info_shows_the_agents_jobs(cluster, agent, tmp_path, playbook):
    results = playbook(
        [
            {
                "spur.cluster.spur_job": {
                    **connection(cluster),
                    "state": "submitted",
                    "name": "sleeper",
                    "wrap": "sleep 30",
                    "work_dir": str(tmp_path),
                },
                "register": "job",
            }
        ]
    )
    job_id = results["job"]["job_id"]
    wait_until(lambda: agent.running().get(job_id), 20, "the job to run on the agent")
    info = run_module(spur_node_info, dict(connection(cluster), agent_probes=[agent.probe_url]))
    (node,) = [n for n in info["nodes"] if n["name"] == agent.name]
    assert node["running_jobs_source"] == "agent"
    (running,) = node["running_jobs"]
    assert running["job_id"] == job_id and running["attempt"] >= 1 and running["supervisor_pid"] > 0


def test_grpc_calls_skip_a_dead_address(cluster, agent):
    """Without a probe that answers, grpc_hosts are tried in turn: a dead one first costs nothing but a retry."""
    follower = next(m for m in cluster.members if m is not cluster.wait_leader())
    args = {"controllers": ["127.0.0.1:9"], "grpc_hosts": ["127.0.0.1:9", follower.grpc_addr], "timeout": 2}

    def answered() -> dict | None:
        info = run_module(spur_node_info, dict(args, names=[agent.name]))
        assert "failed" not in info, info.get("msg")
        # a follower answers from its own copy, which learns of the registration one Raft round later
        return info if info["nodes"] else None

    info = wait_until(answered, 10, "the follower to learn of the agent's registration")
    assert info["nodes"][0]["registered"] is True


# ------------------------------------------------------------------ spur_node


def test_spur_node_drain_and_resume_four_times(cluster, agent, playbook):
    args = {**connection(cluster), "name": agent.name, "reason": "test upgrade", "wait": True, "wait_timeout": 30}
    tasks = four_times("spur.cluster.spur_node", {**args, "state": "drained"}, "drain")
    tasks += four_times("spur.cluster.spur_node", {**args, "state": "resumed"}, "resume")
    results = playbook(tasks)
    drains = [results[f"drain_{i}"] for i in range(4)]
    resumes = [results[f"resume_{i}"] for i in range(4)]
    assert [r["changed"] for r in drains] == CHANGED
    assert [r["changed"] for r in resumes] == CHANGED
    assert drains[1]["outcome"] == "drained" and drains[1]["node"]["state"] == "DRAINED"
    assert drains[1]["node"]["reason"] == "spur-ansible: test upgrade"
    assert drains[1]["drained_before"] is False and drains[3]["drained_before"] is True
    assert resumes[1]["node"]["state"] == "IDLE" and resumes[3]["outcome"] == "in_service"


def test_spur_node_drain_waits_for_a_running_job(cluster, agent, tmp_path, playbook):
    conn = connection(cluster)
    job = {"state": "submitted", "name": "short", "wrap": "sleep 10", "work_dir": str(tmp_path)}
    results = playbook(
        [
            {"spur.cluster.spur_job": {**conn, **job}, "register": "job"},
            {
                "name": "wait until it runs",
                "spur.cluster.spur_node_info": {**conn, "names": [agent.name]},
                "register": "info",
                "until": "info.nodes[0].job_ids | length > 0",
                "retries": 40,
                "delay": 1,
            },
            {
                "spur.cluster.spur_node": {**conn, "name": agent.name, "wait": True, "wait_timeout": 60},
                "register": "drain",
            },
        ]
    )
    drain = results["drain"]
    assert drain["before"]["job_ids"] == [results["job"]["job_id"]]
    assert drain["outcome"] == "drained" and drain["node"]["job_ids"] == []


# ------------------------------------------------------------------ spur_job


def test_spur_job_four_times_reads_the_output(cluster, agent, tmp_path, playbook):
    args = {
        "name": "verify",
        "wrap": "echo hello-from-spur",
        "work_dir": str(tmp_path),
        "idempotency_key": "verify-1",
        "wait_timeout": 60,
    }
    # the connection options come from the action group, set once for the play
    defaults = {"group/spur.cluster.spur": connection(cluster)}
    results = playbook(four_times("spur.cluster.spur_job", args, "job"), module_defaults=defaults)
    runs = [results[f"job_{i}"] for i in range(4)]
    assert [r["changed"] for r in runs] == CHANGED
    assert runs[1]["state"] == "COMPLETED" and runs[1]["exit_code"] == 0 and runs[1]["nodes"] == [agent.name]
    assert runs[1]["output"] == "hello-from-spur\n"
    assert runs[1]["job_id"] == runs[2]["job_id"] == runs[3]["job_id"] and runs[3]["duplicate"] is True


# ------------------------------------------------------------------ spur_wal_level


OLD_CODE = (
    "import sys; from spur_hpc.controller import wal; wal.MAX_WAL_LEVEL = 1; "
    "from spur_hpc.controller.daemon import main; sys.exit(main(sys.argv[1:]))"
)


def start_as_level_one(cluster: ControllerCluster) -> None:
    """Start every controller as a release that reads WAL level 1 only (the cluster is born at level 1)."""
    for m in cluster.members:
        cluster.write_conf(m)
        m.proc = Proc(
            f"spurctld-{m.index}-old",
            [sys.executable, "-c", OLD_CODE, "--conf", str(m.conf_path)],
            m.root / "spurctld.log",
        ).start()
    cluster.wait_leader()


def member_levels(cluster: ControllerCluster) -> dict:
    return {k: v["max_level"] for k, v in cluster.wait_leader().status()["member_info"].items()}


@pytest.fixture
def level_one_cluster(make_cluster):
    cluster = make_cluster(3, start=False)
    start_as_level_one(cluster)
    assert cluster.wait_leader().status()["wal_level"] == 1
    return cluster


def test_wal_level_is_refused_until_every_member_reads_it(level_one_cluster):
    cluster = level_one_cluster
    wait_until(lambda: sorted(member_levels(cluster).values()) == [1, 1, 1], 20, "every member to announce")
    for i in (0, 1):  # upgrade two of three: the third still reads level 1 only
        cluster.restart(i)
    new = MAX_WAL_LEVEL
    wait_until(lambda: sorted(member_levels(cluster).values()) == [1, new, new], 30, "the new members to announce")
    result = run_module(spur_wal_level, dict(connection(cluster), level=new))
    assert result["failed"] and cluster.members[2].raft_addr in result["msg"] and "reads up to level 1" in result["msg"]
    assert result["previous_level"] == 1
    # without a level the module raises only as far as everyone reads: nothing to do
    result = run_module(spur_wal_level, connection(cluster))
    assert "failed" not in result and result["changed"] is False and result["target_level"] == 1
    stub = cluster.stub(cluster.wait_leader())
    assert stub.GetClusterInfo(slurm_pb2.ClusterInfoRequest(), timeout=5).wal_level == 1


def test_wal_level_four_times_after_every_member_is_upgraded(level_one_cluster, playbook):
    cluster = level_one_cluster
    for i in range(3):
        cluster.restart(i)
    wait_until(lambda: set(member_levels(cluster).values()) == {MAX_WAL_LEVEL}, 30, "every member to announce")
    results = playbook(four_times("spur.cluster.spur_wal_level", connection(cluster), "wal"))
    runs = [results[f"wal_{i}"] for i in range(4)]
    assert [r["changed"] for r in runs] == CHANGED
    assert runs[1]["level"] == MAX_WAL_LEVEL and runs[3]["previous_level"] == MAX_WAL_LEVEL


# ------------------------------------------------------------------ spur_release


@pytest.fixture(scope="module")
def releases(tmp_path_factory) -> dict[str, Path]:
    """Two real releases of this tree (versions 0.1.0 and 0.2.0), built once for the module."""
    import subprocess

    root = tmp_path_factory.mktemp("releases")
    built = {}
    repo = Path(__file__).resolve().parents[2]
    for version in ("0.1.0", "0.2.0"):
        out = root / version
        proc = subprocess.run(
            [str(BIN / "spur-release"), "build", "--version", version, "--out", str(out), "--source", str(repo)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            pytest.fail(f"spur-release build failed: {proc.stderr[-2000:]}")
        built[version] = out
    return built


def test_spur_release_four_times_then_roll_back(releases, tmp_path, playbook):
    prefix = tmp_path / "opt-spur"
    first = {"src": str(releases["0.1.0"]), "prefix": str(prefix)}
    second = {"src": str(releases["0.2.0"]), "prefix": str(prefix)}
    tasks = four_times("spur.cluster.spur_release", first, "a")
    tasks += four_times("spur.cluster.spur_release", second, "b")
    tasks += four_times("spur.cluster.spur_release", {**second, "state": "rolled_back"}, "back")
    results = playbook(tasks, timeout=600)
    for prefix_name in ("a", "b", "back"):
        assert [results[f"{prefix_name}_{i}"]["changed"] for i in range(4)] == CHANGED, prefix_name
    a, b = results["a_1"], results["b_1"]
    assert a["current"] == a["release_id"] == f"0.1.0-{a['build']}"
    assert b["current"] == b["release_id"] and b["previous"] == a["release_id"]
    assert results["back_3"]["current"] == a["release_id"] and results["back_3"]["previous"] == b["release_id"]
    assert (prefix / "current").resolve().name == a["release_id"]
    assert (prefix / "releases" / b["release_id"] / "bin" / "spurctld").exists()
    assert b["max_wal_level"] >= 1
