"""spurd: the node agent. Registers with the controller leader, heartbeats, launches jobs through
supervisors (spurstepd), reports how they ended, and survives its own restart without touching them.

Start-up order matters: the sessions left by an earlier spurd are re-adopted and the results of jobs
that ended meanwhile are reported before the agent registers (with the list of what still runs, so the
controller keeps exactly that allocation) and before it serves LaunchJob.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import queue
import socket
import threading
import time
from typing import Any

import grpc

from spur_hpc import auth, buildinfo, conf, grpcutil
from spur_hpc.agent import hostinfo
from spur_hpc.agent.controller_client import ControllerClient, ControllerUnavailable
from spur_hpc.agent.servicer import AgentServicer, running_pb
from spur_hpc.agent.supervisors import Session, SupervisorTable, stepd_command
from spur_hpc.daemon import EXIT_REFUSED, Daemon, StartupError, set_log_level
from spur_hpc.httpprobe import ProbeServer, json_response, text_response
from spur_hpc.model import (
    AGENT_GRPC_PORT,
    CONTROLLER_GRPC_PORT,
    REASON_AGENT_STOPPED,
    normalize_addr,
    split_host_port,
)
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc
from spur_hpc.stepd import enforce
from spur_hpc.stepd.session import SessionError

STARTUP_REPORT_SECS = 10.0  # inline CompleteJob reports at start may take this long in all
FIRST_REGISTER_SECS = 5.0
REPORT_CALL_SECS = 10.0
DEREGISTER_SECS = 5.0
# A result the controller will never accept: give up on it instead of retrying forever.
FINAL_REPORT_CODES = frozenset({grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT})


def detect_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except OSError:
        return os.cpu_count() or 1


def detect_memory_mb(meminfo: str = "/proc/meminfo") -> int:
    try:
        with open(meminfo, encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class AgentDaemon(Daemon):
    program = "spurd"
    description = "Spur node agent"
    conf_role = "agent"

    def __init__(self) -> None:
        super().__init__()
        self.conf: conf.Config | None = None
        self.node = ""
        self.address = ""
        self.cpus = 0
        self.memory_mb = 0
        self.started = time.time()
        self.registered = threading.Event()
        self.last_heartbeat = 0.0
        self.table: SupervisorTable | None = None
        self.client: ControllerClient | None = None
        self.server: grpc.Server | None = None
        self.probe: ProbeServer | None = None
        self.log_level = "info"
        self._lock_fd = -1
        self.cgroup_layout: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []

    # -------------------------------------------------------------- configuration

    def configure(self, args: argparse.Namespace) -> None:
        self.conf = conf.load(args.conf, role=self.conf_role)
        if args.log_level:
            self.log_level = args.log_level.lower()
        else:
            self.log_level = self.conf.log.level
            set_log_level(self.log_level)
        a = self.conf.agent
        try:
            self.verifier = auth.Verifier(self.conf.auth.type, self.conf.auth.munge_socket)
        except auth.AuthError as exc:
            raise StartupError(f"[auth] type = {self.conf.auth.type}: {exc}") from None
        self.node = conf.node_name(self.conf)
        self.address = normalize_addr(a.advertise_addr or a.listen_addr, AGENT_GRPC_PORT)
        host, port = split_host_port(self.address)
        if host in ("0.0.0.0", "::"):
            # A wildcard cannot be dialled: advertise this host's name with the port we listen on.
            self.address = f"{socket.gethostname()}:{port}"
            self.log.info("listen_addr is a wildcard and advertise_addr is unset: advertising %s", self.address)
        self.cpus = a.cpus or detect_cpus()
        self.memory_mb = a.memory_mb or detect_memory_mb()
        hosts = [normalize_addr(h, CONTROLLER_GRPC_PORT) for h in self.conf.controller.hosts]
        self.client = ControllerClient(hosts, auth_type=self.conf.auth.type, munge_socket=self.conf.auth.munge_socket)

    # -------------------------------------------------------------- start

    def start(self) -> None:
        assert self.conf is not None and self.client is not None
        a = self.conf.agent
        try:
            self.table = SupervisorTable(
                a.state_dir,
                self.node,
                stepd_command(a.stepd_path) + ["--kill-wait", str(a.kill_wait_secs)],
                a.launch_timeout_secs,
                self.stopping,
                self.log_level,
            )
        except (OSError, SessionError) as exc:
            raise StartupError(f"[agent] state_dir {a.state_dir}: {exc}; fix its owner/permissions") from None
        # [cgroup] is read here, once: every launch record carries it to spurstepd (reconfigure does not).
        self.table.enforce = {
            "cgroup": enforce.cgroup_settings(self.conf.cgroup),
            "gres_files": conf.parse_gres_files(a.gres_files),
        }
        self.cgroup_layout = enforce.host_layout()
        # The same sentence in the log and in /status: which hierarchy carries each limit, and why.
        self.cgroup_layout["summary"] = enforce.describe_layout(self.cgroup_layout)
        self.log.info("resource enforcement: %s", self.cgroup_layout["summary"])
        try:
            self._lock_state_dir()
            self.server, _port = grpcutil.create_server(normalize_addr(a.listen_addr, AGENT_GRPC_PORT))
            self.probe = ProbeServer(
                a.probe_addr, {"/livez": self._livez, "/readyz": self._readyz, "/status": self._status}
            )
        except OSError as exc:
            raise StartupError(f"{exc}; stop whatever holds it or change [agent] listen_addr/probe_addr") from None
        slurm_pb2_grpc.add_SlurmAgentServicer_to_server(
            AgentServicer(self.node, self.table, self.registered.is_set, self.verifier, self.conf.auth.admins),
            self.server,
        )
        self.probe.start()  # liveness only; /readyz stays 503 until registered
        self.log.info(
            "node %s: %d CPUs, %d MiB; sessions in %s", self.node, self.cpus, self.memory_mb, self.table.state_path
        )
        self.table.reconcile()
        self._report_pending(time.monotonic() + STARTUP_REPORT_SECS)
        self._register(time.monotonic() + FIRST_REGISTER_SECS)
        self.server.start()
        self.log.info(
            "serving SlurmAgent on %s (advertised as %s), probes on %s", a.listen_addr, self.address, a.probe_addr
        )
        for target, name in ((self._heartbeat_loop, "heartbeat"), (self._report_loop, "reporter")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _lock_state_dir(self) -> None:
        """One spurd per state_dir: a second one would adopt and report the same jobs twice."""
        assert self.table is not None
        fd = os.open(
            ".spurd.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.table.state_fd
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StartupError(
                f"[agent] state_dir {self.table.state_path} is in use by spurd pid {holder}; stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    # -------------------------------------------------------------- controller traffic

    @property
    def host(self) -> dict[str, Any]:
        """What a registration tells of the host (scontrol show node's Arch, OS, BootTime and CPU layout)."""
        sockets, cores, threads = hostinfo.cpu_layout(self.cpus)
        return {
            "boot_time": hostinfo.boot_time(),
            "arch": hostinfo.machine(),
            "os": hostinfo.system(),
            "sockets": sockets,
            "cores_per_socket": cores,
            "threads_per_core": threads,
        }

    def _register(self, deadline: float) -> bool:
        assert self.client is not None and self.table is not None and self.conf is not None
        request = slurm_pb2.RegisterAgentRequest(
            name=self.node,
            address=self.address,
            resources=slurm_pb2.NodeResources(
                cpus=self.cpus, memory_mb=self.memory_mb, gres=conf.parse_gres_offer(self.conf.agent.gres)
            ),
            features=list(self.conf.agent.features),
            version=buildinfo.version(),
            build=buildinfo.build(),
            running=running_pb(self.table),
            agent_started=self.started,
            partition=self.conf.agent.partition,
            **self.host,
        )
        try:
            reply = self.client.call("RegisterAgent", request, deadline, self.stopping)
        except ControllerUnavailable as exc:
            self.log.warning("not registered yet: %s", exc)
            return False
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                # Another live spurd holds this node name: retrying cannot help, only a config change can.
                raise StartupError(
                    f"controller {self.client.current} refused the registration: {exc.details()}"
                ) from None
            self.log.error(
                "controller %s refused the registration: %s: %s", self.client.current, exc.code().name, exc.details()
            )
            return False
        self.registered.set()
        self.last_heartbeat = time.time()
        self.log.info(
            "registered with controller %s as node %s (state %s) with %d running jobs",
            self.client.current,
            self.node,
            slurm_pb2.NodeState.Name(reply.node.state),
            len(request.running),
        )
        self._handle_stale(reply.stale)
        return True

    def _register_or_stop(self, deadline: float) -> None:
        """A registration after start-up: a refusal that retrying cannot fix stops spurd (EXIT_REFUSED)."""
        try:
            self._register(deadline)
        except StartupError as exc:
            self.log.error("%s", exc)
            self.request_stop(EXIT_REFUSED)

    def _handle_stale(self, stale: Any) -> None:
        if stale and self.table is not None:
            self.table.cancel_stale([(r.job_id, r.attempt) for r in stale])

    def _heartbeat_loop(self) -> None:
        assert self.conf is not None and self.client is not None and self.table is not None
        interval = self.conf.agent.heartbeat_interval_secs
        while not self.stopping.wait(interval):
            deadline = time.monotonic() + interval
            if not self.registered.is_set():
                self._register_or_stop(deadline)
                continue
            request = slurm_pb2.HeartbeatRequest(name=self.node, running=running_pb(self.table))
            try:
                reply = self.client.call("Heartbeat", request, deadline, self.stopping)
            except ControllerUnavailable as exc:
                self.log.warning("heartbeat not delivered: %s", exc)
                continue
            except grpc.RpcError as exc:
                self.log.warning("heartbeat refused by %s: %s: %s", self.client.current, exc.code().name, exc.details())
                continue
            self.last_heartbeat = time.time()
            if reply.reregister:
                self.log.warning(
                    "controller %s does not know node %s: registering again", self.client.current, self.node
                )
                self.registered.clear()
                self._register_or_stop(time.monotonic() + interval)
                continue
            self._handle_stale(reply.stale)

    def _complete_request(self, session: Session) -> tuple[str, Any]:
        """(the RPC, its request) that reports a finished session: CompleteJob, or CompleteStep for a step."""
        result = session.result or {}
        if session.step:
            return "CompleteStep", slurm_pb2.CompleteStepRequest(
                job_id=session.job_id,
                attempt=session.attempt,
                step_id=session.step,
                node=self.node,
                exit_code=int(result.get("exit_code", 0)),
                signal=int(result.get("signal", 0)),
                state=slurm_pb2.JobState.Value(str(result.get("state", "FAILED"))),
                end_time=float(result.get("end_time") or time.time()),
                reason=str(result.get("reason") or "")[:1000],
            )
        return "CompleteJob", slurm_pb2.CompleteJobRequest(
            job_id=session.job_id,
            attempt=session.attempt,
            node=self.node,
            exit_code=int(result.get("exit_code", 0)),
            signal=int(result.get("signal", 0)),
            state=slurm_pb2.JobState.Value(str(result.get("state", "FAILED"))),
            end_time=float(result.get("end_time") or time.time()),
            reason=str(result.get("reason") or "")[:1000],
        )

    def _deliver(self, session: Session, deadline: float | None) -> bool:
        """CompleteJob until a leader records it (or deadline); then the session is collected."""
        assert self.client is not None and self.table is not None
        method, request = self._complete_request(session)
        pause = 0.5
        while not self.stopping.is_set():
            call_deadline = time.monotonic() + REPORT_CALL_SECS
            if deadline is not None:
                call_deadline = min(call_deadline, deadline)
            try:
                reply = self.client.call(method, request, call_deadline, self.stopping)
            except ControllerUnavailable as exc:
                self.log.warning(
                    "job %d attempt %d: result not delivered yet: %s", session.job_id, session.attempt, exc
                )
            except grpc.RpcError as exc:
                if exc.code() in FINAL_REPORT_CODES:
                    self.log.error(
                        "job %d attempt %d: controller %s will not take the result (%s: %s); dropping it",
                        session.job_id,
                        session.attempt,
                        self.client.current,
                        exc.code().name,
                        exc.details(),
                    )
                    self.table.collect(session)
                    return True
                self.log.warning(
                    "job %d attempt %d: CompleteJob refused (%s: %s); retrying",
                    session.job_id,
                    session.attempt,
                    exc.code().name,
                    exc.details(),
                )
            else:
                self.log.info(
                    "job %d attempt %d: reported %s exit_code=%d signal=%d to %s (%s)",
                    session.job_id,
                    session.attempt,
                    slurm_pb2.JobState.Name(request.state),
                    request.exit_code,
                    request.signal,
                    self.client.current,
                    "recorded" if reply.accepted else "not recorded: the controller had moved on",
                )
                self.table.collect(session)
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self.stopping.wait(pause)
            pause = min(pause * 2, 5.0)
        return False

    def _report_pending(self, deadline: float) -> None:
        """Report every queued result inline; what is left goes to the reporter thread."""
        assert self.table is not None
        left: list[Session] = []
        while True:
            try:
                session = self.table.finished.get_nowait()
            except queue.Empty:
                break
            if time.monotonic() >= deadline or not self._deliver(session, deadline):
                left.append(session)
        for session in left:
            self.table.finished.put(session)
        if left:
            self.log.warning("%d results could not be reported during start-up; retrying in the background", len(left))

    def _report_loop(self) -> None:
        assert self.table is not None
        while not self.stopping.is_set():
            try:
                session = self.table.finished.get(timeout=0.5)
            except queue.Empty:
                continue
            if not self._deliver(session, None):
                self.table.finished.put(session)  # stopping: a restarted spurd finds it in its session

    # -------------------------------------------------------------- probes

    def _livez(self):
        return text_response(200, "ok")

    def _readyz(self):
        if self.registered.is_set():
            return text_response(200, "registered")
        return text_response(503, "not registered with a controller yet")

    def _status(self):
        table = self.table
        running = table.running_jobs() if table is not None else []
        return json_response(
            200,
            {
                "node": self.node,
                "registered": self.registered.is_set(),
                "controller": self.client.current if self.client else "",
                "address": self.address,
                "running_jobs": [{"job_id": j, "attempt": a, "supervisor_pid": p} for j, a, p in running],
                "pending_reports": table.finished.qsize() if table is not None else 0,
                "resources": {"cpus": self.cpus, "memory_mb": self.memory_mb},
                "cgroup": dict(self.cgroup_layout, settings=(self.table.enforce or {}).get("cgroup") if table else {}),
                "state_dir": table.state_path if table is not None else "",
                "last_heartbeat": self.last_heartbeat,
                "started": self.started,
                "pid": os.getpid(),
                "version": buildinfo.version(),
                "build": buildinfo.build(),
            },
        )

    # -------------------------------------------------------------- stop

    def stop(self) -> None:
        self.stopping.set()  # LaunchJob refuses from now on, so "busy" below cannot change
        table = self.table
        if table is not None and self.registered.is_set():
            if table.busy():
                self.log.info(
                    "stopping with %d job supervisors running: not deregistering; they keep running and "
                    "the next spurd re-adopts them",
                    len(table.sessions),
                )
            else:
                self._deregister()
        if self.server is not None:
            self.server.stop(grace=2).wait(3)
        if self.probe is not None and self.probe.thread.is_alive():
            self.probe.stop()  # shutdown() of a server that never served would wait forever
        if self.client is not None:
            self.client.close()

    def _deregister(self) -> None:
        assert self.client is not None
        request = slurm_pb2.DeregisterAgentRequest(name=self.node, reason=REASON_AGENT_STOPPED)
        try:
            # stop is set already; the client must still be allowed to try, so pass no stop event.
            self.client.call("DeregisterAgent", request, time.monotonic() + DEREGISTER_SECS)
            self.log.info("deregistered node %s from controller %s", self.node, self.client.current)
        except ControllerUnavailable as exc:
            self.log.warning("could not deregister: %s", exc)
        except grpc.RpcError as exc:
            self.log.warning(
                "controller refused to deregister node %s: %s: %s", self.node, exc.code().name, exc.details()
            )


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("grpc").setLevel(logging.WARNING)
    return AgentDaemon().main(argv)
