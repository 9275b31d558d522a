"""A node's hardware and boot lines: what spurd reads of its host (agent/hostinfo.py), what the controller keeps of
a registration and of the jobs that leave a node, and what Node messages then carry for `scontrol show node`."""

from __future__ import annotations

import os
from pathlib import Path

from test_wal_state import new_cluster, rec, spec

from spur_hpc.agent import hostinfo
from spur_hpc.cli import nodeview
from spur_hpc.controller.grpc_api import NODE_HOST_FIELDS, node_to_pb

HOST = {"agent_started": 90.0, "boot_time": 50.0, "arch": "aarch64", "os": "Linux 6.1.0 #1 SMP",
        "sockets": 2, "cores_per_socket": 2, "threads_per_core": 2}  # fmt: skip


def write_topology(root: Path, cpus: list[tuple[int, int]]) -> Path:
    """A /sys/devices/system/cpu with one (package, core) per logical CPU."""
    for index, (package, core) in enumerate(cpus):
        topology = root / f"cpu{index}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{package}\n")
        (topology / "core_id").write_text(f"{core}\n")
    (root / "cpufreq").mkdir()  # not a CPU
    return root


def test_the_layout_is_read_from_sysfs_when_it_covers_the_cpus_offered(tmp_path: Path) -> None:
    sysfs = write_topology(tmp_path, [(p, c) for p in (0, 1) for c in (0, 1) for _thread in (0, 1)])
    assert hostinfo.cpu_layout(8, sysfs) == (2, 2, 2)
    assert hostinfo.cpu_layout(4, sysfs) == (0, 0, 0)  # an agent offering half its host: no layout of its own
    assert hostinfo.cpu_layout(4, tmp_path / "none") == (0, 0, 0)


def test_boot_time_is_procs_btime(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n")
    assert hostinfo.boot_time(stat) == 1700000000.0
    assert hostinfo.boot_time(tmp_path / "missing") == 0.0
    uname = os.uname()
    assert hostinfo.system() == f"{uname.sysname} {uname.release} {uname.version}"  # uname -s -r -v


def register(s, host: dict) -> None:
    record = rec("node_register", name="n1", address="10.0.0.1:7000", cpus=8, memory_mb=4096, version="1",
                 build="b", partition="default", running=[], time=100.0, host=host)  # fmt: skip
    assert s.apply(record)["ok"]


def test_the_registration_is_kept_and_a_finished_job_sets_last_busy() -> None:
    s = new_cluster()
    register(s, HOST)
    node = s.nodes["n1"]
    assert node["last_busy"] == 100.0  # Slurm's LastBusyTime starts at the registration
    job = s.apply(rec("job_submit", spec=spec(), key="k", time=101.0))["job_id"]
    assert s.apply(rec("job_start", job_id=job, nodes=["n1"], attempt=1, time=102.0))["ok"]
    s.apply(rec("job_end", job_id=job, attempt=1, state="COMPLETED", exit_code=0, signal=0, time=130.0))
    assert node["last_busy"] == 130.0
    register(s, HOST)  # a restarted agent keeps the node's last busy time
    assert node["last_busy"] == 130.0

    message = node_to_pb({**node, "state": "IDLE", "reason": "", "reason_set_by": "", "reason_time": 0.0})
    assert {field: getattr(message, field) for field in NODE_HOST_FIELDS} == HOST
    text = nodeview.show_node_text(message)
    assert text.startswith("NodeName=n1 Arch=aarch64 CoresPerSocket=2 \n")
    assert "   OS=Linux 6.1.0 #1 SMP \n" in text and " Sockets=2 Boards=1\n" in text
    assert "   State=IDLE ThreadsPerCore=2 " in text and "   NodeAddr=10.0.0.1 NodeHostName=n1 Port=7000 " in text


def test_a_record_without_host_fields_shows_slurms_defaults() -> None:
    s = new_cluster()
    register(s, {})  # an agent from before this field, or a journal written by one
    node = {**s.nodes["n1"], "state": "IDLE", "reason": "", "reason_set_by": "", "reason_time": 0.0}
    text = nodeview.show_node_text(node_to_pb(node))
    assert "NodeName=n1 CoresPerSocket=1 \n" in text and " Sockets=8 Boards=1\n" in text and "   OS=" not in text
    assert "BootTime=None SlurmdStartTime=None\n" in text
