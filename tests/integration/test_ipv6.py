"""IPv6 end to end, as docs/configuration.md promises: three controllers whose gRPC, Raft and probe addresses
are [::1]:PORT elect a leader, an agent on [::1] registers, and a job submitted by sbatch runs and completes.
(pysyncobj splits a Raft address at its last ':', so "[::1]:6821" once failed with "inet_aton() argument 1
must be str, not None".)"""

from __future__ import annotations

import os
import random
import socket
import subprocess

import pytest

from agents import AgentProc
from harness import BIN, TEST_PORTS, wait_until
from prereqs import needs, require

pytestmark = needs(socket.has_ipv6, "this Python has no IPv6", "use a Python built with IPv6")

_HANDED_OUT: set[int] = set()


def free_v6_port() -> int:
    rng = random.Random()
    for _ in range(1000):
        port = rng.choice(TEST_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            try:
                s.bind(("::1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise AssertionError("no free port on ::1")


@pytest.fixture
def v6_loopback():
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        try:
            s.bind(("::1", 0))
        except OSError as exc:
            require(False, f"::1 is not configured on this host ({exc.strerror})", "bring up IPv6 on lo")


def test_a_cluster_on_ipv6_addresses_runs_a_job(v6_loopback, make_cluster, tmp_path):
    cluster = make_cluster(3, start=False)
    for m in cluster.members:
        m.ip = "[::1]"  # Member builds "[::1]:PORT" addresses and http://[::1]:PORT probe URLs from it
        m.grpc_port, m.raft_port, m.probe_port = free_v6_port(), free_v6_port(), free_v6_port()
    cluster.peers = [m.raft_addr for m in cluster.members]
    cluster.hosts = [m.grpc_addr for m in cluster.members]
    cluster.start()
    leader = cluster.wait_leader()
    # each member records its own gRPC address through the log, so a just-elected leader may not know it yet
    status = wait_until(lambda: (st := leader.status()).get("leader_grpc") and st, 30, "the leader's gRPC address")
    assert sorted(status["members"]) == sorted(cluster.peers)
    assert status["leader"] in cluster.peers and status["leader_grpc"] in cluster.hosts

    agent = AgentProc(tmp_path / "agent", cluster.hosts)
    text = agent.conf_path.read_text()
    v4_listen, v4_probe = agent.address, f"{agent.ip}:{agent.probe_port}"
    agent.ip, agent.grpc_port, agent.probe_port = "[::1]", free_v6_port(), free_v6_port()
    text = text.replace(v4_listen, agent.address).replace(v4_probe, f"[::1]:{agent.probe_port}")
    agent.conf_path.write_text(text)
    agent.start()

    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
    env.pop("SPUR_CONTROLLER_ADDR", None)

    def cli(*argv: str) -> str:
        result = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=work, env=env, capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, f"{argv} -> {result.returncode}: {result.stderr}"
        return result.stdout

    job_id = int(cli("sbatch", "--parsable", "--wrap", "echo over v6"))
    wait_until(lambda: f"{job_id} CD {agent.name}" in cli("squeue", "-h", "-t", "all", "-o", "%i %t %N"), 60,
               f"job {job_id} to complete on {agent.name}")
    assert (work / f"slurm-{job_id}.out").read_text() == "over v6\n"
