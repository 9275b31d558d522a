"""Debian's Slurm 22.05 as a peer on loopback: munged, slurmctld, one slurmd per node, optionally slurmdbd + MariaDB.

Shared by bench/slurm_peer.py (one node, a DOWN partition, no accounting) and the capture tool (several nodes,
partitions, accounting). Everything lives under one scratch directory and binds 127.0.0.1; stop() ends every
process started here, and anything else whose command line names the scratch directory (a slurmstepd, say).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the harness: free_port, wait_until
from harness import free_port, wait_until  # noqa: E402

SLURM_PACKAGES = ["slurmctld", "slurmd", "slurm-client", "munge"]
ACCOUNTING_PACKAGES = ["slurmdbd", "mariadb-server"]
SLURM_BIN = Path("/usr/bin")
DB_PASSWORD = "spur-capture"  # a scratch database bound to 127.0.0.1, gone when the peer stops


def installed_versions(packages: list[str]) -> dict[str, str]:
    out = {}
    for p in packages:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}|${Version}", p], capture_output=True, text=True)
        status, _, version = proc.stdout.partition("|")
        if proc.returncode == 0 and status.startswith("install ok installed"):
            out[p] = version
    return out


def ensure_packages(allow_install: bool, packages: list[str] | None = None) -> dict[str, str]:
    """Versions of the packages, installed with apt-get first when missing (unless allow_install is False)."""
    packages = packages or SLURM_PACKAGES
    have = installed_versions(packages)
    missing = [p for p in packages if p not in have]
    if missing:
        if not allow_install:
            names = " ".join(missing)
            raise SystemExit(f"missing packages {names}; install them: apt-get install {names}")
        print(f"installing {' '.join(missing)} with apt-get", flush=True)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *missing], env=env, check=True, timeout=900
        )
        have = installed_versions(packages)
    return have


def hardware() -> dict[str, str]:
    """The CPU layout fields of `slurmd -C` (this machine's), for NodeName lines."""
    out = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=True).stdout
    fields = dict(f.split("=", 1) for f in out.splitlines()[0].split() if "=" in f)
    keep = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
    return {k: fields[k] for k in keep if k in fields}


def localhost_node_line() -> str:
    """NodeName line from `slurmd -C`, renamed to localhost on 127.0.0.1."""
    hw = hardware()
    hw.setdefault("RealMemory", "1024")
    return "NodeName=localhost NodeAddr=127.0.0.1 " + " ".join(f"{k}={v}" for k, v in hw.items())


@dataclass
class PeerShape:
    """What the peer cluster looks like: node names, the NodeName/PartitionName lines, extra slurm.conf lines."""

    cluster_name: str
    nodes: list[str]
    node_lines: str  # NodeName= and PartitionName= lines; {port:NAME} is replaced by that node's slurmd port
    extra_conf: str = ""
    accounting: bool = False


class SlurmPeer:
    """munged + slurmctld + a slurmd per node (+ MariaDB and slurmdbd with accounting) under one directory."""

    def __init__(self, root: Path, shape: PeerShape | None = None) -> None:
        self.root = root
        self.shape = shape or PeerShape(
            "spurbench",
            ["localhost"],
            localhost_node_line() + "\nPartitionName=bench Nodes=localhost Default=YES MaxTime=INFINITE State=DOWN\n",
        )
        self.procs: list[subprocess.Popen] = []
        self.sock = root / "munge" / "munge.socket"
        self.conf = root / "slurm.conf"
        self.ctld_port = free_port("127.0.0.1")
        self.slurmd_ports = {n: free_port("127.0.0.1") for n in self.shape.nodes}
        self.slurmd_port = self.slurmd_ports[self.shape.nodes[0]]
        self.dbd_port = free_port("127.0.0.1")
        self.db_port = free_port("127.0.0.1")

    def env(self) -> dict[str, str]:
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen:
        with open(self.root / "log" / log, "ab") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=self.env(), start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        for d in ("munge", "state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the user nobody reads slurm.conf and reaches the munge socket
        (self.root / "munge").chmod(0o755)
        self._start_munge()
        if self.shape.accounting:
            self._start_accounting()
        self.conf.write_text(self.conf_text())
        self.conf.chmod(0o644)
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        wait_until(self._ctld_answers, 60, "slurmctld to answer")
        for node in self.shape.nodes:
            (self.root / "spool" / node).mkdir(exist_ok=True)
            self._spawn(["slurmd", "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}.out")
        wait_until(self._nodes_up, 60, "every slurmd to register")

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=30, capture_output=True)
        key.chmod(0o600)
        m = self.root / "munge"
        self._spawn(
            [
                "munged",
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={self.sock}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
            "munged.out",
        )
        wait_until(lambda: self.sock.exists(), 15, "munged's socket")

    def _start_accounting(self) -> None:
        """MariaDB on 127.0.0.1 with a scratch data directory, and slurmdbd in front of it."""
        data = self.root / "mysql"
        subprocess.run(
            [
                "mariadb-install-db",
                f"--datadir={data}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            timeout=300,
            capture_output=True,
        )
        sock = self.root / "mysql.sock"
        self._spawn(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                "--bind-address=127.0.0.1",
                f"--port={self.db_port}",
                f"--socket={sock}",
                f"--pid-file={self.root / 'mysql.pid'}",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=64M",
                "--innodb-log-file-size=16M",
            ],
            "mariadbd.out",
        )

        def sql(statement: str) -> bool:
            proc = subprocess.run(
                ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot", "-e", statement],
                capture_output=True,
                text=True,
                timeout=30,
            )
            return proc.returncode == 0

        wait_until(lambda: sql("SELECT 1"), 60, "MariaDB to answer")
        assert sql(
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASSWORD}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
        ), "could not create the database user slurm"
        dbd_conf = self.root / "slurmdbd.conf"
        dbd_conf.write_text(
            f"""AuthType=auth/munge
AuthInfo=socket={self.sock}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={self.dbd_port}
SlurmUser=root
LogFile={self.root / "log" / "slurmdbd.log"}
PidFile={self.root / "slurmdbd.pid"}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={self.db_port}
StorageUser=slurm
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
"""
        )
        dbd_conf.chmod(0o600)
        self._spawn(["slurmdbd", "-D"], "slurmdbd.out")  # reads slurmdbd.conf beside $SLURM_CONF

        def dbd_listens() -> bool:
            import socket

            with socket.socket() as s:
                s.settimeout(1)
                return s.connect_ex(("127.0.0.1", self.dbd_port)) == 0

        wait_until(dbd_listens, 90, "slurmdbd to listen")

    def conf_text(self) -> str:
        r = self.root
        nodes = self.shape.node_lines
        for name, port in self.slurmd_ports.items():
            nodes = nodes.replace("{port:" + name + "}", str(port))
        if self.shape.accounting:
            accounting = (
                "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost\n"
                f"AccountingStoragePort={self.dbd_port}\nAccountingStoragePass={self.sock}\n"
                "JobAcctGatherType=jobacct_gather/none"
            )
        else:
            accounting = "AccountingStorageType=accounting_storage/none"
        return f"""ClusterName={self.shape.cluster_name}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
AuthType=auth/munge
AuthInfo=socket={self.sock}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
{accounting}
JobCompType=jobcomp/none
MailProg=/bin/true
MaxJobCount=50000
ReturnToService=1
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
{self.shape.extra_conf}
{nodes}
"""

    def _ctld_answers(self) -> bool:
        proc = subprocess.run(
            [str(SLURM_BIN / "scontrol"), "ping"], env=self.env(), capture_output=True, text=True, timeout=20
        )
        return "UP" in proc.stdout

    def node_states(self) -> dict[str, str]:
        proc = subprocess.run(
            [str(SLURM_BIN / "sinfo"), "-h", "-N", "-o", "%N %T"],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=20,
        )
        return dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)

    def _nodes_up(self) -> bool:
        states = self.node_states()
        bad = ("down", "down*", "unknown", "unknown*", "idle*")
        return all(n in states and states[n] not in bad for n in self.shape.nodes)

    def job_count(self) -> int:
        proc = subprocess.run(
            [str(SLURM_BIN / "squeue"), "-h", "-o", "%i"], env=self.env(), capture_output=True, text=True, timeout=60
        )
        return len(proc.stdout.split())

    def logs(self, tail: int = 3000) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*")):
            out.append(f"----- {log.name}\n{log.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        # anything else still running from this scratch directory (a slurmstepd, say)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                except OSError:
                    continue
                if str(self.root).encode() in cmdline and int(entry) != os.getpid():
                    try:
                        os.kill(int(entry), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
