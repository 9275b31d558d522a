#!/usr/bin/env python3
"""Test hosts for Molecule's tier 2: systemd-nspawn machines (real systemd as PID 1) in network namespaces.

    testhosts.py --dir DIR create NAME=IP [NAME=IP ...]   boot one machine per NAME, reachable at IP
    testhosts.py --dir DIR crash NAME                     kill -9 the machine's PID 1 (a host crash)
    testhosts.py --dir DIR boot NAME                      boot it again on the same disk (a reboot)
    testhosts.py --dir DIR partition NAME | heal NAME     cut its network link / plug it back
    testhosts.py --dir DIR status                         what runs, as JSON
    testhosts.py --dir DIR destroy                        stop everything and remove every trace

Each machine's root is an overlay: the lower layer is this machine's own "/" (read-only), the upper layer a
directory of its own on a tmpfs, so a machine starts with every package this machine has and writes only
to its own upper layer; a crash and boot keeps that layer, like a disk. Each machine lives in a network
namespace of its own, linked by a veth pair to one bridge inside a "switch" namespace. The addresses exist
only inside those namespaces: nothing is routed to or from this machine's network.

Each machine starts in a cgroup of its own in this machine's cgroup v1 memory, cpuset, devices and cpu hierarchies
(a child of this tool's cgroup, removed by destroy), mounted writable inside it: nspawn alone mounts them read-only,
so a spurd there could enforce no job's limits (docs/agent.md, "What each test tier enforces").

Ansible reaches a machine with the community.docker.nsenter connection and ansible_nsenter_pid set to the
machine's PID 1, which DIR/NAME.pid holds (rewritten by every boot). The tier 2 scenarios use spur_nsenter
(connection_plugins/ beside this file), the same connection with pipelining: one process per module, not seven.

Needs root, iproute2 and systemd-nspawn (Debian: systemd-container, installed here when missing).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

BOOT_TIMEOUT_SECS = 60.0
# This machine's own services, enabled in its image, that a test host must not start: they would only
# cost boot time and memory (Debian's PostgreSQL cluster, timers, consoles).
WANTS_DIRS = ("multi-user.target.wants", "timers.target.wants", "getty.target.wants", "sysinit.target.wants")
ALWAYS_MASKED = ("console-getty.service", "getty@tty1.service", "systemd-timesyncd.service", "postgresql.service")
KEEP = ("machines.target", "remote-fs.target")
# Services the roles under test enable and start themselves (spur_munge): disabled on a test host, as on a fresh
# one, but not masked, which would stop the role from starting them.
DISABLED_NOT_MASKED = ("munge.service",)
# cgroup v1 hierarchies in which each host gets a writable cgroup of its own: a real hybrid host lets its spurd create
# job cgroups there (memory, CPU and device enforcement, docs/agent.md), and nspawn alone shows a container the
# host's hierarchies read-only, where spurd could enforce none of them.
DELEGATED_V1_CONTROLLERS = ("memory", "cpuset", "devices", "cpu")
DELEGATED_V1_PREFIX = "spur-testhosts"
# Interface names are at most 15 bytes; each host gets "<prefix>h<index>" and "<prefix>s<index>".
MAX_PREFIX = 6


class TestHostError(Exception):
    """One line that says what failed and what to do."""


def run(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        output = done.stderr.strip() or done.stdout.strip()
        raise TestHostError(f"{' '.join(argv)} failed (exit {done.returncode}): {output}")
    if not quiet and done.returncode != 0:
        print(f"testhosts: {' '.join(argv)}: {done.stderr.strip()}", file=sys.stderr)
    return done


def ensure_tools() -> None:
    if os.geteuid() != 0:
        raise TestHostError("test hosts need root (network namespaces, mounts, systemd-nspawn); run as root")
    if shutil.which("ip") is None:
        raise TestHostError("the ip command is missing; apt-get install iproute2")
    if shutil.which("systemd-nspawn") is None:
        # The one package this tool needs beyond a Debian base system; CI installs it too.
        print("testhosts: installing systemd-container (systemd-nspawn)", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "systemd-container"]):
            done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise TestHostError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
        if shutil.which("systemd-nspawn") is None:
            raise TestHostError("systemd-nspawn is still missing after installing systemd-container")


class Lab:
    """The machines of one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir.absolute()
        self.file = self.dir / "hosts.json"
        self.data = json.loads(self.file.read_text()) if self.file.exists() else {}

    def save(self) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.file)

    @property
    def hosts(self) -> dict:
        return self.data.setdefault("hosts", {})

    # ------------------------------------------------------------------------------------------ create

    def create(self, specs: list[str], prefix: str, tmpfs_size: str) -> None:
        ensure_tools()
        if self.hosts:
            raise TestHostError(f"{self.dir} already holds hosts {', '.join(self.hosts)}; destroy them first")
        if not 0 < len(prefix) <= MAX_PREFIX or not prefix.isalnum():
            raise TestHostError(f"prefix {prefix!r} must be 1 to {MAX_PREFIX} letters or digits")
        wanted = []
        for spec in specs:
            name, _, ip = spec.partition("=")
            try:
                ipaddress.IPv4Address(ip)
            except ValueError:
                raise TestHostError(f"{spec!r}: expected NAME=IPv4, like ctl-0=10.213.0.1") from None
            wanted.append((name, ip))
        names = [n for n, _ in wanted]
        if len(set(names)) != len(names) or not names:
            raise TestHostError(f"host names must be given and unique: {', '.join(names)}")
        self.dir.mkdir(parents=True, exist_ok=True)
        disks = self.dir / "disks"
        disks.mkdir(exist_ok=True)
        # The upper layers sit on a file system of their own: overlayfs refuses an upper layer inside "/".
        run("mount", "-t", "tmpfs", "-o", f"size={tmpfs_size},mode=0700", "spur-testhosts", str(disks))
        self.data.update(prefix=prefix, disks=str(disks), switch=f"{prefix}-sw", hosts={})
        self.save()
        switch = self.data["switch"]
        run("ip", "netns", "add", switch)
        run("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", switch, "link", "set", "br0", "up")
        for index, (name, ip) in enumerate(wanted):
            self.hosts[name] = dict(index=index, ip=ip, netns=f"{prefix}-{name}", root=str(disks / name / "root"))
            self.save()
            self.make_disk(name, wanted)
            self.make_network(name)
        for name in names:
            self.boot(name, wait=False)
        for name in names:
            self.wait_booted(name)

    def make_disk(self, name: str, wanted: list[tuple[str, str]]) -> None:
        base = Path(self.data["disks"]) / name
        for part in ("upper", "work", "root"):
            (base / part).mkdir(parents=True, exist_ok=True)
        upper = base / "upper"
        # What makes this host itself: its name, the other hosts' addresses, a machine id of its own, and
        # this machine's extra services masked.
        (upper / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
        (upper / "etc" / "hostname").write_text(name + "\n")
        hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        hosts += [f"{ip} {host}" for host, ip in wanted]
        (upper / "etc" / "hosts").write_text("\n".join(hosts) + "\n")
        (upper / "etc" / "machine-id").write_text(secrets.token_hex(16) + "\n")
        units = set(ALWAYS_MASKED)
        for wants in WANTS_DIRS:
            directory = Path("/etc/systemd/system") / wants
            if directory.is_dir():
                units.update(u.name for u in directory.iterdir() if u.name not in KEEP)
                for unit in DISABLED_NOT_MASKED:
                    if (directory / unit).is_symlink():
                        # An overlay whiteout (a 0:0 character device) hides the lower layer's "enabled" link.
                        whiteout = upper / "etc" / "systemd" / "system" / wants / unit
                        whiteout.parent.mkdir(parents=True, exist_ok=True)
                        if not whiteout.exists() and not whiteout.is_symlink():
                            os.mknod(whiteout, stat.S_IFCHR | 0o000, os.makedev(0, 0))
        units -= set(DISABLED_NOT_MASKED)
        for unit in sorted(units):
            link = upper / "etc" / "systemd" / "system" / unit
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        (upper / "etc" / "systemd" / "system" / "default.target").unlink(missing_ok=True)
        (upper / "etc" / "systemd" / "system" / "default.target").symlink_to("/lib/systemd/system/multi-user.target")
        self.mount_root(name)

    def mount_root(self, name: str) -> None:
        base = Path(self.data["disks"]) / name
        root = base / "root"
        if os.path.ismount(root):
            return
        options = f"lowerdir=/,upperdir={base / 'upper'},workdir={base / 'work'}"
        run("mount", "-t", "overlay", "overlay", "-o", options, str(root))

    def make_network(self, name: str) -> None:
        host = self.hosts[name]
        prefix, switch, netns = self.data["prefix"], self.data["switch"], host["netns"]
        inside, outside = f"{prefix}h{host['index']}", f"{prefix}s{host['index']}"
        run("ip", "netns", "add", netns)
        run("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
        run("ip", "link", "set", inside, "netns", netns)
        run("ip", "link", "set", outside, "netns", switch)
        run("ip", "-n", netns, "link", "set", inside, "name", "eth0")
        run("ip", "-n", netns, "addr", "add", f"{host['ip']}/24", "dev", "eth0")
        run("ip", "-n", netns, "link", "set", "eth0", "up")
        run("ip", "-n", netns, "link", "set", "lo", "up")
        run("ip", "-n", switch, "link", "set", outside, "master", "br0", "up")
        host["switch_port"] = outside
        self.save()

    # ------------------------------------------------------------------------------------------ lifecycle

    def boot(self, name: str, wait: bool = True) -> None:
        host = self.host(name)
        if self.pid1(name):
            raise TestHostError(f"{name} runs already (PID 1 is {self.pid1(name)}); crash it first")
        self.mount_root(name)
        log = open(self.dir / f"{name}.log", "ab")
        argv = [
            "systemd-nspawn", "--register=no", "--keep-unit", "--quiet", "--console=passive",
            "-D", host["root"], "-M", name, f"--network-namespace-path=/run/netns/{host['netns']}",
            # The overlay's lower layer is this machine's "/", /tmp included: give each host a /tmp of its own.
            "--tmpfs=/tmp", "-b",
        ]  # fmt: skip
        host["cgroups"] = subtrees = self.cgroup_subtrees(name)
        self.save()

        def enter_cgroups() -> None:  # in the child, before systemd-nspawn runs: the container starts inside them
            for subtree in subtrees:
                Path(subtree, "cgroup.procs").write_text(f"{os.getpid()}\n")

        nspawn = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, preexec_fn=enter_cgroups
        )
        host["nspawn_pid"] = nspawn.pid
        host["pid1"] = self.find_pid1(nspawn.pid, name)
        self.save()
        self.delegate_cgroups(name, host["pid1"], subtrees)
        (self.dir / f"{name}.pid").write_text(f"{host['pid1']}\n")
        if wait:
            self.wait_booted(name)

    def cgroup_subtrees(self, name: str) -> list[str]:
        """This host's cgroup of its own in each of this machine's v1 hierarchies, made now: a child
        spur-testhosts-<prefix>-<name> of the cgroup this tool runs in (as a container manager nests its containers)."""
        found = []
        for mount, own in v1_mounts().items():
            subtree = Path(mount + own) / f"{DELEGATED_V1_PREFIX}-{self.data['prefix']}-{name}"
            subtree.mkdir(exist_ok=True)
            if (subtree / "cpuset.cpus").exists():  # a cpuset takes tasks only once it has CPUs and memory nodes
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (subtree / knob).read_text().strip():
                        (subtree / knob).write_text((subtree.parent / knob).read_text().strip())
            found.append(str(subtree))
        return found

    @staticmethod
    def delegate_cgroups(name: str, pid1: int, subtrees: list[str]) -> None:
        """Make the host's view of its v1 cgroups writable. nspawn starts the container in them (they are its cgroup
        namespace's roots) but mounts them read-only; --bind= cannot help, it comes before those mounts."""
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid1}/comm").read_text().strip() != "systemd":  # nspawn still sets the container up
            if time.monotonic() > deadline:
                raise TestHostError(f"{name}: PID 1 did not become systemd within 10 s")
            time.sleep(0.01)
        if subtrees:
            script = " && ".join(f"mount -o remount,bind,rw {mount}" for mount in v1_mounts())
            run("nsenter", "-t", str(pid1), "-m", "sh", "-ec", script)

    def find_pid1(self, nspawn_pid: int, name: str) -> int:
        """The container's init: the descendant of systemd-nspawn that is PID 1 in its own namespace."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for pid in descendants(nspawn_pid):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
                if len(nspid) > 1 and nspid[-1] == "1":
                    return pid
            time.sleep(0.05)
        raise TestHostError(f"{name}: systemd-nspawn started no PID 1 within 10 s; see {self.dir / (name + '.log')}")

    def wait_booted(self, name: str) -> None:
        pid = self.host(name)["pid1"]
        deadline = time.monotonic() + BOOT_TIMEOUT_SECS
        state = ""
        while time.monotonic() < deadline:
            done = subprocess.run(
                ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "systemctl", "is-system-running"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            state = done.stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.1)
        raise TestHostError(f"{name} did not finish booting within {BOOT_TIMEOUT_SECS:.0f} s (state {state!r})")

    def crash(self, name: str) -> None:
        host = self.host(name)
        pid = self.pid1(name)
        if not pid:
            raise TestHostError(f"{name} is not running")
        os.kill(pid, signal.SIGKILL)
        self.wait_gone(host)
        host["pid1"] = None
        self.save()

    def wait_gone(self, host: dict) -> None:
        nspawn = host.get("nspawn_pid")
        deadline = time.monotonic() + 10
        while nspawn and time.monotonic() < deadline and alive(nspawn):
            reap(nspawn)
            time.sleep(0.05)

    def set_link(self, name: str, state: str) -> None:
        host = self.host(name)
        run("ip", "-n", self.data["switch"], "link", "set", host["switch_port"], state)

    # ------------------------------------------------------------------------------------------ destroy

    def destroy(self) -> None:
        for name, host in self.hosts.items():
            pid = self.pid1(name)
            if pid:
                os.kill(pid, signal.SIGKILL)
            self.wait_gone(host)
        for host in self.hosts.values():
            root = host.get("root")
            if root and os.path.ismount(root):
                run("umount", "-l", root, check=False)
            run("ip", "netns", "del", host["netns"], check=False, quiet=True)
        if self.data.get("switch"):
            run("ip", "netns", "del", self.data["switch"], check=False, quiet=True)
        disks = self.data.get("disks")
        if disks and os.path.ismount(disks):
            run("umount", "-l", disks, check=False)
        self.release_leftovers()
        for host in self.hosts.values():
            for subtree in host.get("cgroups") or ():
                remove_cgroup_tree(Path(subtree))
        if self.dir.exists():
            shutil.rmtree(self.dir)

    def release_leftovers(self) -> None:
        """What a run killed half-way may leave without a record: machines and mounts under DIR. A host's root is
        an overlay over this machine's "/", so nothing may be deleted under DIR while one is still mounted."""
        prefix = str(self.dir.resolve()) + "/"
        for pid_file in self.dir.glob("*.pid") if self.dir.is_dir() else ():
            try:
                pid = int(pid_file.read_text().strip())
                if os.readlink(f"/proc/{pid}/root").startswith(prefix):  # a machine's PID 1, not a reused pid
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv and argv[0].endswith(b"systemd-nspawn") and any(a.startswith(prefix.encode()) for a in argv):
                    try:
                        os.kill(int(entry), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        with open("/proc/mounts", encoding="utf-8") as mounts:
            points = [line.split()[1] for line in mounts]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            run("umount", "-l", point, check=False)

    # ------------------------------------------------------------------------------------------ helpers

    def host(self, name: str) -> dict:
        if name not in self.hosts:
            raise TestHostError(f"no host {name!r} in {self.dir} (hosts: {', '.join(self.hosts) or 'none'})")
        return self.hosts[name]

    def pid1(self, name: str) -> int | None:
        pid = self.host(name).get("pid1")
        return pid if pid and alive(pid) else None

    def status(self) -> dict:
        return {name: dict(ip=h["ip"], pid1=self.pid1(name), netns=h["netns"]) for name, h in self.hosts.items()}


def v1_mounts() -> dict[str, str]:
    """{mount point: this process's cgroup in it} of this machine's writable cgroup v1 hierarchies of
    DELEGATED_V1_CONTROLLERS (none on a cgroup v2 host)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            own[controller] = path
    found = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != "cgroup" or "rw" not in fields[3].split(","):
            continue
        for controller in set(fields[3].split(",")) & set(DELEGATED_V1_CONTROLLERS):
            found[fields[1]] = own.get(controller, "/").rstrip("/")
    return found


def remove_cgroup_tree(top: Path) -> None:
    """rmdir a cgroup and the cgroups the host's jobs left in it, deepest first (rmdir is how a cgroup goes)."""
    if not top.is_dir():
        return
    for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            directory.rmdir()
        except OSError as exc:
            print(f"testhosts: cannot remove cgroup {directory}: {exc.strerror}", file=sys.stderr)
    try:
        top.rmdir()
    except OSError as exc:
        print(f"testhosts: cannot remove cgroup {top}: {exc.strerror}", file=sys.stderr)


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                found.extend(int(c) for c in children)
                todo.extend(int(c) for c in children)
        except OSError:
            continue
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=os.environ.get("SPUR_TESTHOSTS_DIR"),
                        help="state directory (default $SPUR_TESTHOSTS_DIR)")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="create and boot hosts")
    create.add_argument("hosts", nargs="+", metavar="NAME=IP")
    create.add_argument("--prefix", default="spur", help="network namespace and interface prefix (max 6)")
    create.add_argument("--tmpfs-size", default="6G", help="size of the tmpfs holding every host's disk")
    for command in ("crash", "boot", "partition", "heal"):
        sub.add_parser(command).add_argument("name")
    sub.add_parser("status")
    sub.add_parser("destroy")
    args = parser.parse_args(argv)
    if args.dir is None:
        parser.error("give --dir or set SPUR_TESTHOSTS_DIR")
    lab = Lab(args.dir)
    try:
        if args.command == "create":
            try:
                lab.create(args.hosts, args.prefix, args.tmpfs_size)
            except BaseException:
                lab.destroy()  # never leave half a lab behind
                raise
        elif args.command == "crash":
            lab.crash(args.name)
        elif args.command == "boot":
            lab.boot(args.name)
        elif args.command == "partition":
            lab.set_link(args.name, "down")
        elif args.command == "heal":
            lab.set_link(args.name, "up")
        elif args.command == "destroy":
            lab.destroy()
        print(json.dumps(lab.status() if args.command != "destroy" else {}, indent=2))
    except TestHostError as exc:
        print(f"testhosts: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
