"""What spurd reports about its host when it registers: machine, system, boot time and CPU layout.

Read from os.uname(), /proc/stat and /sys/devices/system/cpu (no lscpu): `scontrol show node` prints them as
Slurm's Arch, OS, BootTime, Sockets, CoresPerSocket and ThreadsPerCore. What cannot be read is 0 or empty.
"""

from __future__ import annotations

import os
from pathlib import Path

CPU_SYSFS = Path("/sys/devices/system/cpu")
PROC_STAT = Path("/proc/stat")


def boot_time(stat: Path = PROC_STAT) -> float:
    """The host's boot as epoch seconds (/proc/stat's btime); 0 when it cannot be read."""
    try:
        for line in stat.read_text().splitlines():
            key, _space, value = line.partition(" ")
            if key == "btime" and value.strip().isdigit():
                return float(value.strip())
    except OSError:
        pass
    return 0.0


def machine() -> str:
    return os.uname().machine


def system() -> str:
    """`uname -s -r -v`, as Slurm's OS= shows it: Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian ..."""
    uname = os.uname()
    return f"{uname.sysname} {uname.release} {uname.version}"


def cpu_layout(cpus: int, sysfs: Path = CPU_SYSFS) -> tuple[int, int, int]:
    """(sockets, cores per socket, threads per core) of the online CPUs, when they multiply to the `cpus` the
    agent offers; (0, 0, 0) otherwise (an agent offering part of its host, or no topology to read): the
    controller then shows Slurm's default for a node configured by CPU count, one core per socket."""
    cores: dict[str, set[str]] = {}  # socket (physical_package_id) -> its core ids
    threads = 0
    for topology in sorted(sysfs.glob("cpu[0-9]*/topology")):
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            continue
        cores.setdefault(package, set()).add(core)
        threads += 1
    sockets = len(cores)
    if not sockets:
        return 0, 0, 0
    per_socket = max(len(ids) for ids in cores.values())
    if any(len(ids) != per_socket for ids in cores.values()) or threads % (sockets * per_socket):
        return 0, 0, 0  # an uneven layout Slurm's three numbers cannot describe
    per_core = threads // (sockets * per_socket)
    if sockets * per_socket * per_core != cpus:
        return 0, 0, 0
    return sockets, per_socket, per_core
