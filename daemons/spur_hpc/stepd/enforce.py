"""Enforcing a job's allocation on its node: memory, CPUs and devices, from [cgroup] and the launch record.

spurd tells spurstepd what the controller allocated (the launch record's "enforce": the node share with its
exact CPU and gres unit indices, the [cgroup] settings, the node's gres device files); spurstepd never decides
an allocation, it only installs it. Which hierarchy carries each limit is chosen per host:

- cgroup v2, when the unified hierarchy has the controller (memory, cpuset, cpu): memory.max / memory.high /
  memory.swap.max, cpuset.cpus, cpu.max in the job's tracking cgroup (tracking.py).
- cgroup v1, on a hybrid host (the v2 tree without those controllers, the v1 memory / cpuset / devices / cpu
  hierarchies mounted writable; a container's read-only view of them is no use):
  <v1 mount>/spur/<node>-<hash>/job_<id>_<attempt>, a step in a child step_<id> of it.
  memory.limit_in_bytes, memory.memsw.limit_in_bytes, cpuset.cpus, devices.deny / devices.allow, cpu.cfs_*.
- The device filter: the v1 devices controller where it is mounted writable, else a BPF_PROG_TYPE_CGROUP_DEVICE
  program attached to the job's cgroup v2 directory. Without the capabilities for that it logs "device filter not
  installed" and runs the job unfiltered (or refuses the launch with required = true).

Anything that cannot be installed is one log line and a degraded job, unless [cgroup] required = true: then the
launch is refused with that line.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import time
from typing import Any

from spur_hpc.stepd.session import SessionError
from spur_hpc.stepd.tracking import CGROUP_PARENT, agent_cgroup_dir, find_cgroup2_mount

log = logging.getLogger("spurstepd.enforce")

MIB = 1024 * 1024
V1_CONTROLLERS = ("memory", "cpuset", "devices", "cpu")

# Device nodes every job may open without an allocation: the base pseudo-devices and the host's
# infrastructure (RDMA verbs for MPI and NCCL over InfiniBand, the kernel's fuse and net tun devices are not).
BASE_DEVICE_RULES = (
    "c 1:3 rwm",  # /dev/null
    "c 1:5 rwm",  # /dev/zero
    "c 1:7 rwm",  # /dev/full
    "c 1:8 rwm",  # /dev/random
    "c 1:9 rwm",  # /dev/urandom
    "c 5:0 rwm",  # /dev/tty
    "c 5:2 rwm",  # /dev/ptmx
    "c 136:* rwm",  # /dev/pts/*
)
INFRASTRUCTURE_DEVICE_DIRS = ("/dev/infiniband",)


class EnforcementError(SessionError):
    """[cgroup] required = true and a limit could not be installed: the launch is refused with this line."""


def cgroup_settings(cgroup_conf: Any) -> dict[str, Any]:
    """The [cgroup] section as the launch record carries it (spurd reads it once, at start)."""
    return {
        key: list(value) if isinstance(value := getattr(cgroup_conf, key), tuple) else value
        for key in (
            "constrain_cores",
            "constrain_ram_space",
            "allowed_ram_percent",
            "constrain_swap",
            "oom_kill_job",
            "cpu_quota",
            "constrain_devices",
            "extra_device_paths",
            "required",
        )
    }


def v1_hierarchies(mounts_file: str = "/proc/mounts") -> dict[str, tuple[str, bool]]:
    """controller -> (mount point, writable) of the cgroup v1 hierarchies that carry memory, cpuset, devices, cpu.

    A later mount at the same point covers the earlier ones (a container manager binds a writable subtree over
    the read-only view systemd-nspawn gives a container), so the last entry of a controller decides. A read-only
    hierarchy (nspawn's own view, a container without delegation) cannot hold a job's cgroup."""
    found: dict[str, tuple[str, bool]] = {}
    try:
        with open(mounts_file, encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 4 or fields[2] != "cgroup":
                    continue
                options = fields[3].split(",")
                for controller in V1_CONTROLLERS:
                    if controller in options:
                        found[controller] = (fields[1].encode().decode("unicode_escape"), "ro" not in options)
    except OSError:
        pass
    return found


def find_v1_mounts(mounts_file: str = "/proc/mounts") -> dict[str, str]:
    """controller -> mount point of the writable cgroup v1 hierarchies that carry memory, cpuset, devices, cpu."""
    return {controller: path for controller, (path, writable) in v1_hierarchies(mounts_file).items() if writable}


def v2_controllers(mount: str | None) -> set[str]:
    if not mount:
        return set()
    try:
        with open(os.path.join(mount, "cgroup.controllers"), encoding="ascii") as fh:
            return set(fh.read().split())
    except OSError:
        return set()


def host_layout(mounts_file: str = "/proc/mounts") -> dict[str, Any]:
    """What this host offers, and which hierarchy each limit would use (spurd's log at start and /status)."""
    v2 = find_cgroup2_mount(mounts_file)
    v2_has = v2_controllers(v2)
    hierarchies = v1_hierarchies(mounts_file)
    v1 = {controller: path for controller, (path, writable) in hierarchies.items() if writable}
    use: dict[str, str] = {}
    for limit, controller in (("memory", "memory"), ("cpuset", "cpuset"), ("cpu", "cpu")):
        if controller in v2_has:
            use[limit] = "v2"
        elif controller in v1:
            use[limit] = "v1"
        else:
            use[limit] = "none"
    use["devices"] = "v1" if "devices" in v1 else ("v2 BPF" if v2 else "none")
    return {
        "cgroup2_mount": v2 or "",
        "cgroup2_controllers": sorted(v2_has),
        "cgroup1_mounts": v1,
        "cgroup1_read_only": sorted(c for c, (_path, writable) in hierarchies.items() if not writable),
        "use": use,
    }


def describe_layout(layout: dict[str, Any]) -> str:
    use = layout["use"]
    parts = [f"{limit} via {how}" for limit, how in use.items()]
    why = (
        f"cgroup2 at {layout['cgroup2_mount'] or '(none)'} has controllers "
        f"{','.join(layout['cgroup2_controllers']) or '(none)'}; cgroup v1 hierarchies: "
        f"{','.join(sorted(layout['cgroup1_mounts'])) or '(none)'}"
    )
    if layout.get("cgroup1_read_only"):
        why += (
            f"; read-only, so unusable: {','.join(layout['cgroup1_read_only'])} (a container's view: give it a "
            "writable subtree of them)"
        )
    return f"{'; '.join(parts)} ({why})"


def device_number(path: str) -> tuple[str, int, int] | None:
    """("c" or "b", major, minor) of a device node, or None when path is not one."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        return None
    return kind, os.major(st.st_rdev), os.minor(st.st_rdev)


def usable_cpus() -> list[int]:
    """The CPUs spurstepd may run on; the controller's CPU indices point into this list."""
    return sorted(os.sched_getaffinity(0))


class Plan:
    """What the launch record asks to enforce, worked out before anything is written."""

    def __init__(self, launch: dict[str, Any]) -> None:
        enforce = launch.get("enforce") or {}
        self.settings: dict[str, Any] = enforce.get("cgroup") or {}
        alloc = enforce.get("alloc") or {}
        self.alloc = alloc
        self.gres_files: dict[str, list[str]] = enforce.get("gres_files") or {}
        self.active = bool(enforce)
        s = self.settings
        memory_mb = int(alloc.get("memory_mb") or 0)
        self.memory_bytes = 0
        if s.get("constrain_ram_space") and memory_mb > 0:
            self.memory_bytes = int(memory_mb * MIB * float(s.get("allowed_ram_percent") or 100) / 100)
        self.cpus: list[int] = []
        if s.get("constrain_cores") and alloc.get("chosen"):
            usable = usable_cpus()
            self.cpus = sorted({usable[i % len(usable)] for i in alloc.get("cpu_ids") or ()})
        self.cpu_count = int(alloc.get("cpus") or 0)
        gres_ids: dict[str, list[int]] = alloc.get("gres_ids") or {}
        self.granted: list[str] = []
        if not alloc.get("chosen"):
            # A controller before WAL level 3 (or release) names no units: every gres file stays open, as before.
            self.granted = [path for key in sorted(self.gres_files) for path in self.gres_files[key]]
        for key, indices in sorted(gres_ids.items()):
            files = self.gres_files.get(key) or []
            self.granted.extend(files[i] for i in indices if 0 <= i < len(files))
        self.gres_ids = gres_ids

    def gpu_indices(self) -> list[int]:
        """Positions of the job's GPUs among the node's GPU device files (every gpu key, in name order): what
        CUDA_VISIBLE_DEVICES and friends name."""
        order: list[tuple[str, int]] = []
        for key in sorted(self.gres_files):
            if key == "gpu" or key.startswith("gpu:"):
                order.extend((key, i) for i in range(len(self.gres_files[key])))
        mine = {(key, i) for key, ids in self.gres_ids.items() for i in ids if key == "gpu" or key.startswith("gpu:")}
        if not order:  # no device files declared: the unit indices themselves
            return sorted(i for _key, i in mine)
        return [pos for pos, unit in enumerate(order) if unit in mine]


def gpu_environment(launch: dict[str, Any]) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES, ROCR/HIP_VISIBLE_DEVICES, SLURM_JOB_GPUS (and GPU_DEVICE_ORDINAL) for the job's GPUs."""
    plan = Plan(launch)
    if not any(key == "gpu" or key.startswith("gpu:") for key in plan.gres_ids):
        return {}
    indices = ",".join(str(i) for i in plan.gpu_indices())
    return {
        "CUDA_VISIBLE_DEVICES": indices,
        "ROCR_VISIBLE_DEVICES": indices,
        "HIP_VISIBLE_DEVICES": indices,
        "GPU_DEVICE_ORDINAL": indices,
        "SLURM_JOB_GPUS": indices,
        "SLURM_STEP_GPUS": indices,
    }


# ------------------------------------------------------------------ the cgroup v2 device filter (BPF)

BPF_PROG_LOAD, BPF_PROG_ATTACH = 5, 8
BPF_PROG_TYPE_CGROUP_DEVICE, BPF_CGROUP_DEVICE = 15, 6
BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR = 1, 2
BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    import struct

    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def device_program(rules: list[str]) -> bytes:
    """A BPF_PROG_TYPE_CGROUP_DEVICE program allowing exactly the devices.allow-style rules ("c 1:3 rwm",
    "c 136:* rwm"; access is not narrowed) and denying everything else."""
    ldx_w, and_k, jne_k, mov_k, exit_ = 0x61, 0x57, 0x55, 0xB7, 0x95
    code = [
        _insn(ldx_w, dst=2, src=1, off=0),  # r2 = access_type
        _insn(and_k, dst=2, imm=0xFFFF),  # r2 = device type
        _insn(ldx_w, dst=3, src=1, off=4),  # r3 = major
        _insn(ldx_w, dst=4, src=1, off=8),  # r4 = minor
    ]
    for rule in rules:
        kind, number = rule.split()[:2]
        major, _, minor = number.partition(":")
        checks = [(2, BPF_DEVCG_DEV_CHAR if kind == "c" else BPF_DEVCG_DEV_BLOCK)]
        if major != "*":
            checks.append((3, int(major)))
        if minor != "*":
            checks.append((4, int(minor)))
        block_len = len(checks) + 2
        for index, (reg, value) in enumerate(checks):
            code.append(_insn(jne_k, dst=reg, off=block_len - 1 - index, imm=value))
        code += [_insn(mov_k, dst=0, imm=1), _insn(exit_)]
    code += [_insn(mov_k, dst=0, imm=0), _insn(exit_)]
    return b"".join(code)


def _bpf(cmd: int, attr: bytes) -> int:
    import ctypes
    import platform

    number = BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no bpf() syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, 128)
    result = libc.syscall(number, cmd, buf, 128)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def attach_device_filter(cgroup_dir: str, rules: list[str]) -> None:
    """Load the device program and attach it to a cgroup v2 directory (needs CAP_BPF and CAP_NET_ADMIN, or
    CAP_SYS_ADMIN). The attachment keeps the program alive as long as the cgroup exists."""
    import ctypes
    import struct

    program = ctypes.create_string_buffer(device_program(rules))
    license_ = ctypes.create_string_buffer(b"GPL")
    count = (len(program.raw) - 1) // 8
    attr = struct.pack(
        "=IIQQIIQII16s",
        BPF_PROG_TYPE_CGROUP_DEVICE,
        count,
        ctypes.addressof(program),
        ctypes.addressof(license_),
        0,
        0,
        0,
        0,
        0,
        b"spur_devices",
    )
    prog_fd = _bpf(BPF_PROG_LOAD, attr)
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            _bpf(BPF_PROG_ATTACH, struct.pack("=IIII", cgroup_fd, prog_fd, BPF_CGROUP_DEVICE, 0))
        finally:
            os.close(cgroup_fd)
    finally:
        os.close(prog_fd)


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(value)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return ""


class Enforcer:
    """Installs the plan for one supervisor (a batch job, or one node's part of a step) and reads back OOM kills."""

    def __init__(self, launch: dict[str, Any], state_dir: str, job_id: int, attempt: int, step: str = "") -> None:
        self.plan = Plan(launch)
        self.node = launch["node"]
        self.state_dir = state_dir
        self.job_id = job_id
        self.attempt = attempt
        self.step = step
        self.v1_dirs: dict[str, str] = {}  # controller -> this supervisor's directory (job's, or its step child)
        self.v1_job_dirs: dict[str, str] = {}
        self.v2_dir = ""
        self.installed: list[str] = []
        self.problems: list[str] = []

    @property
    def label(self) -> str:
        return f"job {self.job_id}" + (f" step {self.step}" if self.step else "")

    # ------------------------------------------------------------------ installing

    def install(self, v2_dir: str = "") -> None:
        """Create the cgroups and write the limits (before the job is forked). Problems are logged, or raise
        EnforcementError when [cgroup] required = true."""
        if not self.plan.active:
            return
        plan, s = self.plan, self.plan.settings
        self.v2_dir = v2_dir
        layout = host_layout()
        use = layout["use"]
        v1 = layout["cgroup1_mounts"]
        if v2_dir:
            self._v2_enable(v2_dir, [c for c in ("memory", "cpuset", "cpu") if use.get(c) == "v2"])
        if plan.memory_bytes:
            if use["memory"] == "v2" and v2_dir:
                self._v2_memory()
            elif "memory" in v1:
                self._v1_memory(v1["memory"])
            else:
                self.problems.append("memory limit not installed: no writable cgroup memory controller on this host")
        if plan.cpus:
            if use["cpuset"] == "v2" and v2_dir:
                self._try("cpuset", lambda: self._v2_cpuset())
            elif "cpuset" in v1:
                self._try("cpuset", lambda: self._v1_cpuset(v1["cpuset"]))
            else:
                self.problems.append("cpuset not installed: no writable cgroup cpuset controller on this host")
        if s.get("cpu_quota") and plan.cpu_count:
            if use["cpu"] == "v2" and v2_dir:
                self._try(
                    "cpu quota", lambda: _write(os.path.join(v2_dir, "cpu.max"), f"{plan.cpu_count * 100000} 100000")
                )
            elif "cpu" in v1:
                self._try("cpu quota", lambda: self._v1_cpu(v1["cpu"]))
            else:
                self.problems.append("cpu quota not installed: no writable cgroup cpu controller on this host")
        if s.get("constrain_devices"):
            if "devices" in v1:
                self._try("device filter", lambda: self._v1_devices(v1["devices"]))
            elif v2_dir:
                self._v2_devices(v2_dir)
            else:
                self.problems.append("device filter not installed: no cgroup of the job to attach it to")
        for problem in self.problems:
            if s.get("required"):
                raise EnforcementError(
                    f"{self.label}: {problem}, and [cgroup] required = true refuses the launch; "
                    "set required = false or give spurd the cgroup controllers"
                )
            log.warning("%s: %s; the job runs without it", self.label, problem)
        if self.installed:
            log.info("%s: enforced %s", self.label, ", ".join(self.installed))

    @staticmethod
    def _v2_enable(v2_dir: str, controllers: list[str]) -> None:
        """Enable the controllers in cgroup.subtree_control from the mount down to the job's parent (only
        directories without processes of their own lie on that path)."""
        if not controllers:
            return
        mount = find_cgroup2_mount() or ""
        parts = os.path.relpath(os.path.dirname(v2_dir), mount).split(os.sep)
        path = mount
        for part in [""] + parts:
            path = os.path.join(path, part) if part else path
            try:
                _write(os.path.join(path, "cgroup.subtree_control"), " ".join(f"+{c}" for c in controllers))
            except OSError as exc:
                log.debug("cannot enable %s in %s: %s", controllers, path, exc)

    def _try(self, what: str, action: Any) -> None:
        try:
            action()
        except OSError as exc:
            self.problems.append(f"{what} not installed: {exc.strerror or exc}")

    def _v1_dir(self, controller: str, mount: str, setup_job: Any = None) -> str:
        """<mount>/spur/<node>-<hash>/job_<id>_<attempt>[/step_<step>], created (the job level too, for a step of
        an allocation with no batch script). setup_job(path) initialises a job level this call created."""
        parent = agent_cgroup_dir(mount, self.node, self.state_dir)
        os.makedirs(parent, exist_ok=True)
        job_dir = os.path.join(parent, f"job_{self.job_id}_{self.attempt}")
        if controller == "cpuset":
            self._cpuset_inherit(os.path.join(mount, CGROUP_PARENT))
            self._cpuset_inherit(parent)
        try:
            os.mkdir(job_dir)
            created = True
        except FileExistsError:
            created = False
        if setup_job is not None and (created or not self.step):
            setup_job(job_dir)
        self.v1_job_dirs[controller] = job_dir
        path = job_dir
        if self.step:
            path = os.path.join(job_dir, f"step_{self.step}")
            os.makedirs(path, exist_ok=True)
        self.v1_dirs[controller] = path
        return path

    @staticmethod
    def _cpuset_inherit(path: str) -> None:
        """A v1 cpuset accepts tasks only once cpuset.cpus and cpuset.mems are set: copy the parent's."""
        parent = os.path.dirname(path)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not _read(os.path.join(path, name)).strip():
                _write(os.path.join(path, name), _read(os.path.join(parent, name)).strip())

    def _v1_memory(self, mount: str) -> None:
        plan, s = self.plan, self.plan.settings

        def limits(path: str) -> None:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(plan.memory_bytes))
            _write(os.path.join(path, "memory.soft_limit_in_bytes"), str(plan.memory_bytes))
            if s.get("constrain_swap"):
                try:
                    _write(os.path.join(path, "memory.memsw.limit_in_bytes"), str(plan.memory_bytes))
                except OSError as exc:  # swap accounting off in the kernel
                    self.problems.append(f"swap limit not installed: {exc.strerror}")
            else:
                try:
                    _write(os.path.join(path, "memory.swappiness"), "0")
                except OSError:
                    pass

        try:
            self._v1_dir("memory", mount, limits)
        except OSError as exc:
            self.problems.append(f"memory limit not installed: {exc.strerror or exc}")
            return
        self.installed.append(f"memory {plan.memory_bytes // MIB} MiB (v1)")

    def _v2_memory(self) -> None:
        plan, s = self.plan, self.plan.settings
        try:
            _write(os.path.join(self.v2_dir, "memory.max"), str(plan.memory_bytes))
            _write(os.path.join(self.v2_dir, "memory.high"), str(plan.memory_bytes))
            _write(os.path.join(self.v2_dir, "memory.swap.max"), "0" if s.get("constrain_swap") else "max")
            if s.get("oom_kill_job"):
                _write(os.path.join(self.v2_dir, "memory.oom.group"), "1")
        except OSError as exc:
            self.problems.append(f"memory limit not installed: {exc.strerror or exc}")
            return
        self.installed.append(f"memory {plan.memory_bytes // MIB} MiB (v2)")

    def _cpus_text(self) -> str:
        return ",".join(str(c) for c in self.plan.cpus)

    def _v1_cpuset(self, mount: str) -> None:
        def cpus(path: str) -> None:
            self._cpuset_inherit(path)
            _write(os.path.join(path, "cpuset.cpus"), self._cpus_text())

        path = self._v1_dir("cpuset", mount, cpus)
        if self.step:
            self._cpuset_inherit(path)
        self.installed.append(f"cpuset {self._cpus_text()} (v1)")

    def _v2_cpuset(self) -> None:
        _write(os.path.join(self.v2_dir, "cpuset.cpus"), self._cpus_text())
        self.installed.append(f"cpuset {self._cpus_text()} (v2)")

    def _v1_cpu(self, mount: str) -> None:
        def quota(path: str) -> None:
            _write(os.path.join(path, "cpu.cfs_period_us"), "100000")
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(self.plan.cpu_count * 100000))

        self._v1_dir("cpu", mount, quota)
        self.installed.append(f"cpu quota {self.plan.cpu_count} CPUs (v1)")

    def device_rules(self) -> list[str]:
        rules = list(BASE_DEVICE_RULES)
        paths = list(self.plan.granted) + list(self.plan.settings.get("extra_device_paths") or ())
        for directory in INFRASTRUCTURE_DEVICE_DIRS:
            try:
                paths.extend(os.path.join(directory, name) for name in sorted(os.listdir(directory)))
            except OSError:
                pass
        for path in paths:
            number = device_number(path)
            if number is None:
                if path in self.plan.granted:
                    log.warning("%s: gres file %s is not a device node; nothing to allow", self.label, path)
                continue
            rules.append(f"{number[0]} {number[1]}:{number[2]} rwm")
        return rules

    def _v1_devices(self, mount: str) -> None:
        def deny_all(path: str) -> None:
            _write(os.path.join(path, "devices.deny"), "a")
            for rule in self.device_rules():
                _write(os.path.join(path, "devices.allow"), rule)

        self._v1_dir("devices", mount, deny_all)
        self.installed.append(f"device filter allowing {len(self.plan.granted)} gres files (v1)")

    def _v2_devices(self, v2_dir: str) -> None:
        try:
            attach_device_filter(v2_dir, self.device_rules())
        except OSError as exc:
            self.problems.append(
                f"device filter not installed: {exc.strerror or exc} (a BPF device program needs CAP_BPF and "
                "CAP_NET_ADMIN, or CAP_SYS_ADMIN, and a bpf() system call that no seccomp filter refuses)"
            )
            return
        self.installed.append(f"device filter allowing {len(self.plan.granted)} gres files (v2 BPF)")

    # ------------------------------------------------------------------ placing, reading back, removing

    def place(self, pid: int) -> None:
        """Move a freshly forked child into every v1 cgroup (the v2 one is the tracker's business)."""
        for controller, path in self.v1_dirs.items():
            try:
                _write(os.path.join(path, "cgroup.procs"), str(pid))
            except OSError as exc:
                message = f"cannot move pid {pid} into {path}: {exc.strerror or exc}"
                log.warning("%s: %s; %s is not enforced", self.label, message, controller)

    def oom_kills(self) -> int:
        """How many processes the OOM killer killed in this supervisor's cgroup."""
        if "memory" in self.v1_dirs:
            text = _read(os.path.join(self.v1_dirs["memory"], "memory.oom_control"))
        elif self.v2_dir and self.plan.memory_bytes:
            text = _read(os.path.join(self.v2_dir, "memory.events"))
        else:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                try:
                    return int(value)
                except ValueError:
                    return 0
        return 0

    def kill_all(self) -> None:
        """SIGKILL what is left in the v1 memory cgroup (oom_kill_job: one OOM kill ends the whole job)."""
        import signal

        path = self.v1_dirs.get("memory")
        if not path:
            return
        for line in _read(os.path.join(path, "cgroup.procs")).split():
            try:
                os.kill(int(line), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass

    def cleanup(self) -> None:
        """Remove this supervisor's v1 directories (a step's child; a batch job's, once its steps left)."""
        for controller, path in self.v1_dirs.items():
            targets = [path]
            if self.step:
                targets.append(self.v1_job_dirs[controller])  # ours to remove only when no other step is in it
            for target in targets:
                for _ in range(50):
                    try:
                        os.rmdir(target)
                        break
                    except FileNotFoundError:
                        break
                    except OSError as exc:
                        if exc.errno != errno.EBUSY or target != path:
                            break
                        time.sleep(0.02)
