"""spurd's table of job supervisors: start them, re-adopt them after a restart, watch them, collect results.

spurd never runs a job. Each LaunchJob gets a session directory and a detached spurstepd; spurd then
keeps one watcher thread per session that long-polls the supervisor's socket ("wait") until the job
ends, and hands the result to the reporter. A result is collected (supervisor released, session
removed) only after a controller leader has recorded it, so a result outlives any number of spurd
restarts. Nothing in this module talks to the controller.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from spur_hpc.model import NODE_FAIL
from spur_hpc.stepd import jobspec, protocol
from spur_hpc.stepd.session import (
    RESULT_FILE,
    SOCKET_FILE,
    SUPERVISOR_FILE,
    SessionDir,
    SessionError,
    create_session,
    list_session_names,
    open_session,
    open_state_dir,
    parse_session_name,
    pid_matches,
    remove_session,
    session_name,
    write_launch,
    write_step_launch,
)
from spur_hpc.stepd.supervisor import read_launch
from spur_hpc.stepd.tracking import cgroup_of_record

log = logging.getLogger("spurd.supervisors")

WAIT_POLL_SECS = 20.0  # one long-poll "wait" on a supervisor; a dead connection is noticed at least this often
UNREACHABLE_RETRY_SECS = 1.0
REMEMBER_COLLECTED = 4096  # collected attempts remembered, so a late LaunchJob retry cannot run a job twice


class LaunchError(Exception):
    """A supervisor could not be started; retryable tells the servicer which gRPC code to use."""

    def __init__(self, message: str, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass
class Session:
    job_id: int
    attempt: int
    dir: SessionDir
    supervisor_pid: int = 0
    state: str = "launching"  # launching -> running -> finished -> (collected: gone from the table)
    result: dict[str, Any] | None = None
    report: bool = True  # False for an older attempt dropped on start: nobody wants its result
    adopted: bool = False
    launch_error: str = ""
    cancel_wanted: bool = False
    ready: threading.Event = field(default_factory=threading.Event)
    step: str = ""  # "" for the batch script's supervisor; "0", "1", ... for an srun step's on this node

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.job_id, self.attempt, self.step)

    @property
    def label(self) -> str:
        """job N (attempt A), or step N.M (attempt A), for log lines."""
        return f"step {self.job_id}.{self.step}" if self.step else f"job {self.job_id}"

    @property
    def socket_path(self) -> str:
        return self.dir.fd_path(SOCKET_FILE)


def stepd_command(configured: str) -> list[str]:
    """spurstepd: as configured, else the one installed beside spurd (never searched on $PATH)."""
    if configured:
        return [configured]
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "spurstepd")
    if os.access(beside, os.X_OK):
        return [beside]
    # Running from a source tree (python -m spur_hpc.agent): the same interpreter runs the module.
    return [sys.executable, "-m", "spur_hpc.stepd"]


class SupervisorTable:
    def __init__(
        self,
        state_dir: str,
        node: str,
        stepd_cmd: list[str],
        launch_timeout: float,
        stopping: threading.Event,
        log_level: str = "info",
    ) -> None:
        self.state_path = os.path.abspath(state_dir)
        self.node = node
        self.stepd_cmd = stepd_cmd
        self.launch_timeout = launch_timeout
        self.stopping = stopping
        self.log_level = log_level
        self.state_fd = open_state_dir(self.state_path)
        self.sessions: dict[tuple[int, int], Session] = {}
        self.launching = 0
        self.lock = threading.Lock()
        self.finished: queue.Queue[Session] = queue.Queue()
        self.collected: OrderedDict[tuple[int, int], int] = OrderedDict()
        # What every launch record carries for spurstepd to enforce ([cgroup], gres files); spurd sets it.
        self.enforce: dict[str, Any] = {}

    def close(self) -> None:
        os.close(self.state_fd)

    # -------------------------------------------------------------- views

    def running_jobs(self) -> list[tuple[int, int, int]]:
        """(job_id, attempt, supervisor pid) of every attempt this node holds, finished-but-unreported included:
        its allocation is the controller's until the result is recorded."""
        with self.lock:
            held = [s for s in self.sessions.values() if s.report and s.state in ("running", "finished")]
        # A step's supervisor holds its job's attempt too (so a job that ended makes it stale), but the batch
        # supervisor's pid is the one shown when both run here.
        pairs: dict[tuple[int, int], int] = {}
        for s in sorted(held, key=lambda s: (s.step != "", s.step)):
            pairs.setdefault((s.job_id, s.attempt), s.supervisor_pid)
        return sorted((j, a, p) for (j, a), p in pairs.items())

    def busy(self) -> bool:
        with self.lock:
            return bool(self.sessions) or self.launching > 0

    def find(self, job_id: int, attempt: int = 0, step: str = "") -> Session | None:
        with self.lock:
            if attempt:
                return self.sessions.get((job_id, attempt, step))
            candidates = [s for s in self.sessions.values() if s.job_id == job_id and s.step == step and s.report]
        return max(candidates, key=lambda s: s.attempt) if candidates else None

    # -------------------------------------------------------------- launching

    def launch(
        self,
        job_id: int,
        attempt: int,
        nodes: list[str],
        spec: dict[str, Any],
        script: str,
        job_fields: dict[str, int] | None = None,
        alloc: dict[str, Any] | None = None,
    ) -> tuple[int, bool]:
        """Start a supervisor for (job_id, attempt); (supervisor pid, already_running). Idempotent per attempt.

        job_fields: the Job's array_job_id, array_task_id and restart_count for the launch record.
        alloc: the job's share of this node as the controller decided it (protoconv.alloc_from_pb)."""
        jobspec.check_launch(job_id, attempt, script, spec)  # raises InvalidJob: one line for the controller
        key = (job_id, attempt, "")
        with self.lock:
            if self.stopping.is_set():
                raise LaunchError("spurd is stopping; launch the job elsewhere or retry when it is back")
            if key in self.collected:
                # This attempt already ran here and its result is recorded: a retried request must not rerun it.
                return self.collected[key], True
            existing = self.sessions.get(key)
            batch = [s for s in self.sessions.values() if s.job_id == job_id and not s.step]
            newer = [s for s in batch if s.attempt > attempt]
            if existing is None and not newer:
                older = [s for s in batch if s.attempt < attempt]
                session = Session(job_id, attempt, dir=SessionDir("", -1, job_id, attempt))
                self.sessions[key] = session
                self.launching += 1
        if newer:
            raise LaunchError(
                f"job {job_id}: attempt {attempt} is older than attempt {newer[0].attempt} on this node", False
            )
        if existing is not None:
            # A repeat (the controller retried): answer with what the first request started.
            existing.ready.wait(self.launch_timeout + 5)
            if existing.launch_error:
                raise LaunchError(existing.launch_error)
            if existing.adopted and not existing.supervisor_pid:
                # A session found at start with neither a supervisor record nor an answer on its socket: the
                # spurd before this one was stopped in the middle of this launch. Saying "already running"
                # would end the job NODE_FAIL once no supervisor shows up; failing the launch makes the
                # controller requeue it, and the next attempt replaces this session.
                raise LaunchError(
                    f"job {job_id} attempt {attempt}: the spurd before this one was stopped while launching it, "
                    "and no supervisor answers for it"
                )
            return existing.supervisor_pid, True
        try:
            for old in older:
                log.info(
                    "job %d attempt %d replaces attempt %d on this node: cancelling the old one",
                    job_id,
                    attempt,
                    old.attempt,
                )
                old.report = False
                self.signal(old, 0)
            self._start(session, nodes, spec, script, job_fields, alloc=alloc)
        except BaseException as exc:
            session.launch_error = str(exc)
            raise
        finally:
            with self.lock:
                self.launching -= 1
            session.ready.set()
        threading.Thread(target=self._watch, args=(session,), name=f"watch-{job_id}.{attempt}", daemon=True).start()
        return session.supervisor_pid, False

    def launch_step(
        self,
        job_id: int,
        attempt: int,
        nodes: list[str],
        spec: dict[str, Any],
        step: dict[str, Any],
        alloc: dict[str, Any] | None = None,
        job_fields: dict[str, int] | None = None,
    ) -> tuple[int, bool]:
        """Start the supervisor of this node's part of a job step; (supervisor pid, already_running).
        Idempotent per (job, attempt, step): a retried LaunchStep answers with the first supervisor.
        job_fields: as for launch (the step's tasks see the array ids and the restart count too)."""
        jobspec.check_step_launch(job_id, attempt, spec, step)  # raises InvalidJob
        step_id = str(step["step_id"])
        key = (job_id, attempt, step_id)
        with self.lock:
            if self.stopping.is_set():
                raise LaunchError("spurd is stopping; retry the step when it is back")
            if key in self.collected:
                return self.collected[key], True
            existing = self.sessions.get(key)
            if existing is None:
                session = Session(job_id, attempt, dir=SessionDir("", -1, job_id, attempt, step_id), step=step_id)
                self.sessions[key] = session
                self.launching += 1
        if existing is not None:
            existing.ready.wait(self.launch_timeout + 5)
            if existing.launch_error:
                raise LaunchError(existing.launch_error)
            return existing.supervisor_pid, True
        try:
            self._start(session, nodes, spec, "", job_fields, step=step, alloc=alloc)
        except BaseException as exc:
            session.launch_error = str(exc)
            raise
        finally:
            with self.lock:
                self.launching -= 1
            session.ready.set()
        name = f"watch-{job_id}.{step_id}.{attempt}"
        threading.Thread(target=self._watch, args=(session,), name=name, daemon=True).start()
        return session.supervisor_pid, False

    def _start(
        self,
        session: Session,
        nodes: list[str],
        spec: dict[str, Any],
        script: str,
        job_fields: dict[str, int] | None = None,
        step: dict[str, Any] | None = None,
        alloc: dict[str, Any] | None = None,
    ) -> None:
        name = session_name(session.job_id, session.attempt, session.step)
        try:
            session.dir = create_session(self.state_fd, self.state_path, session.job_id, session.attempt, session.step)
        except FileExistsError:
            # Not in the table, so no supervisor of ours owns it: a leftover of a launch that never completed.
            log.warning("session %s/%s exists but belongs to no supervisor; replacing it", self.state_path, name)
            remove_session(self.state_fd, name)
            session.dir = create_session(self.state_fd, self.state_path, session.job_id, session.attempt, session.step)
        except (OSError, SessionError) as exc:
            self._forget(session)
            raise LaunchError(f"cannot create session {self.state_path}/{name}: {exc}") from None
        try:
            enforce = dict(self.enforce, alloc=alloc) if self.enforce else None
            if step is not None:
                write_step_launch(session.dir, self.node, nodes, spec, step, enforce, job_fields)
            else:
                write_launch(session.dir, self.node, nodes, spec, script.encode(), job_fields, enforce)
            log_fd = session.dir.open_log()
        except OSError as exc:
            self._discard(session)
            raise LaunchError(f"cannot write session {session.dir.path}: {exc}") from None
        argv = self.stepd_cmd + ["--session", session.dir.path, "--log-level", self.log_level]
        try:
            # The first process forks the real supervisor into a new session and exits: we reap it below
            # and never become the supervisor's parent.
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_fd,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as exc:
            self._discard(session)
            raise LaunchError(f"cannot run {argv[0]}: {exc.strerror}; check [agent] stepd_path") from None
        finally:
            os.close(log_fd)
        try:
            line = self._read_handshake(proc)
        finally:
            proc.stdout.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.warning("spurstepd for job %d did not detach within 5 s", session.job_id)
        if line is None:
            # It may still come up; the watcher finds it (or its absence) and cancels it.
            session.state = "running"
            session.cancel_wanted = True
            session.report = False
            threading.Thread(target=self._watch, args=(session,), daemon=True).start()
            raise LaunchError(f"spurstepd for job {session.job_id} did not start within {self.launch_timeout} s")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = {"ok": False, "error": f"spurstepd said {line[:200]!r}"}
        if not answer.get("ok"):
            self._discard(session)
            raise LaunchError(f"spurstepd refused job {session.job_id}: {answer.get('error')}", retryable=False)
        session.supervisor_pid = int(answer["pid"])
        session.state = "running"
        log.info(
            "job %d attempt %d: supervisor pid %d started (job pid %s)",
            session.job_id,
            session.attempt,
            session.supervisor_pid,
            answer.get("job_pid"),
        )

    def _read_handshake(self, proc: subprocess.Popen) -> str | None:
        end = time.monotonic() + self.launch_timeout
        data = b""
        fd = proc.stdout.fileno()
        while not data.endswith(b"\n"):
            left = end - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break  # EOF: it died before answering
                data += chunk
        return data.decode(errors="replace").strip() or '{"ok": false, "error": "spurstepd exited without a word"}'

    def _forget(self, session: Session, collected: bool = False) -> None:
        with self.lock:
            if self.sessions.get(session.key) is session:
                del self.sessions[session.key]
            if collected:
                self.collected[session.key] = session.supervisor_pid
                while len(self.collected) > REMEMBER_COLLECTED:
                    self.collected.popitem(last=False)

    def _discard(self, session: Session) -> None:
        """Remove a session whose supervisor never started."""
        self._forget(session)
        name = session.dir.name
        session.dir.close()
        try:
            remove_session(self.state_fd, name)
        except OSError as exc:
            log.warning("cannot remove session %s/%s: %s", self.state_path, name, exc)

    # -------------------------------------------------------------- signals

    def signal(self, session: Session, sig: int, suspend: bool = False) -> bool:
        """Send sig (0 = cancel the whole job) to a session's supervisor; True when it took it. With suspend,
        sig is scontrol suspend's SIGSTOP or resume's SIGCONT, and the supervisor holds the time limit meanwhile."""
        if sig == 0:
            session.cancel_wanted = True
        if session.dir.fd < 0:
            return False
        plain = {"op": "signal", "signal": sig}
        try:
            reply = protocol.call(
                session.socket_path, {"op": "suspend", "resume": sig == signal.SIGCONT} if suspend else plain, timeout=5
            )
            if suspend and not reply.get("ok") and "unknown op" in str(reply.get("error")):
                # a spurstepd of an older release (it outlives spurd's upgrades): the signal alone still stops
                # or continues the job; only its own time limit keeps running
                reply = protocol.call(session.socket_path, plain, timeout=5)
        except protocol.SupervisorUnreachable as exc:
            log.warning("job %d attempt %d: cannot signal its supervisor: %s", session.job_id, session.attempt, exc)
            return False
        return bool(reply.get("ok") and reply.get("delivered"))

    def cancel_stale(self, stale: list[tuple[int, int]]) -> None:
        """The controller no longer runs these attempts: cancel their supervisors, the steps' included."""
        for job_id, attempt in stale:
            with self.lock:
                sessions = [s for s in self.sessions.values() if (s.job_id, s.attempt) == (job_id, attempt)]
            for session in sessions:
                if session.state == "finished" or session.cancel_wanted:
                    continue
                log.warning(
                    "controller no longer runs job %d attempt %d: cancelling its %s",
                    job_id,
                    attempt,
                    f"step {session.step}" if session.step else "batch script",
                )
                self.signal(session, 0)

    # -------------------------------------------------------------- watching

    def _watch(self, session: Session) -> None:
        """Long-poll the supervisor until the job ends; then queue the result for the reporter."""
        cancel_sent = False
        while not self.stopping.is_set():
            if session.cancel_wanted and not cancel_sent:
                cancel_sent = self.signal(session, 0)
            try:
                reply = protocol.call(
                    session.socket_path, {"op": "wait", "timeout": WAIT_POLL_SECS}, timeout=WAIT_POLL_SECS + 10
                )
            except protocol.SupervisorUnreachable as exc:
                outcome = self._without_socket(session)
                if outcome is None:
                    log.debug("job %d: supervisor alive but not answering (%s); retrying", session.job_id, exc)
                    self.stopping.wait(UNREACHABLE_RETRY_SECS)
                    continue
                self._finished(session, outcome)
                return
            if not reply.get("ok"):
                log.warning("job %d: supervisor answered %s", session.job_id, reply.get("error"))
                self.stopping.wait(UNREACHABLE_RETRY_SECS)
                continue
            if reply.get("state") == "finished" and isinstance(reply.get("result"), dict):
                self._finished(session, reply["result"])
                return

    def _without_socket(self, session: Session) -> dict[str, Any] | None:
        """The socket does not answer: None if the supervisor still lives, else the job's result.

        A supervisor that died after writing result.json left the true outcome there. One that died
        before (kill -9, OOM killer) leaves an unknown outcome: its job is killed and reported NODE_FAIL.
        """
        try:
            record = session.dir.read_record_if_present(SUPERVISOR_FILE, "supervisor")
        except (SessionError, OSError) as exc:
            log.error("job %d: %s", session.job_id, exc)
            record = None
        if record and pid_matches(int(record.get("pid", 0)), int(record.get("start_ticks", -1))):
            return None
        if record is None and self._young(session):
            return None  # a supervisor that is still starting has not written its record yet
        try:
            result = session.dir.read_record_if_present(RESULT_FILE, "result")
        except (SessionError, OSError) as exc:
            log.error("job %d attempt %d: refusing its result: %s", session.job_id, session.attempt, exc)
            result = None
        if result is not None:
            log.info(
                "job %d attempt %d: supervisor is gone; its recorded result is %s exit_code=%s",
                session.job_id,
                session.attempt,
                result.get("state"),
                result.get("exit_code"),
            )
            return result
        log.error(
            "job %d attempt %d: supervisor died without recording a result; killing what is left of the job "
            "and reporting NODE_FAIL",
            session.job_id,
            session.attempt,
        )
        self._kill_orphaned_job(record or {})
        return {
            "job_id": session.job_id,
            "attempt": session.attempt,
            "state": NODE_FAIL,
            "exit_code": 0,
            "signal": 0,
            "end_time": time.time(),
            "reason": "job supervisor lost",
        }

    def _young(self, session: Session) -> bool:
        try:
            age = time.time() - os.fstat(session.dir.fd).st_mtime
        except OSError:
            return False
        return age < self.launch_timeout

    def _kill_orphaned_job(self, record: dict[str, Any]) -> None:
        tracker = cgroup_of_record(str(record.get("cgroup") or ""))
        if tracker is not None:
            tracker.kill_all()
            tracker.wait_empty(5.0)
            tracker.cleanup()
            return
        job_pid = int(record.get("job_pid") or 0)
        if job_pid and pid_matches(job_pid, int(record.get("job_start_ticks", -1))):
            # Without a cgroup the best handle left is the job's own session (it called setsid()).
            try:
                os.killpg(job_pid, signal.SIGKILL)
            except OSError:
                pass

    def _finished(self, session: Session, result: dict[str, Any]) -> None:
        with self.lock:
            session.result = result
            session.state = "finished"
        if not session.report:
            log.info(
                "job %d attempt %d ended (%s); it was superseded, so it is not reported",
                session.job_id,
                session.attempt,
                result.get("state"),
            )
            self.collect(session)
            return
        self.finished.put(session)

    def collect(self, session: Session) -> None:
        """The result is recorded by the controller (or unwanted): release the supervisor, remove the session."""
        if session.dir.fd >= 0:
            try:
                protocol.call(session.socket_path, {"op": "release"}, timeout=5)
            except protocol.SupervisorUnreachable:
                pass  # already gone; the files are all that is left
        self._forget(session, collected=True)
        name = session.dir.name
        session.dir.close()
        try:
            remove_session(self.state_fd, name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.error("cannot remove session %s/%s: %s", self.state_path, name, exc)

    # -------------------------------------------------------------- start-up

    def reconcile(self) -> None:
        """Before spurd serves: re-adopt every live supervisor, pick up results of jobs that ended while spurd
        was down (queued for the reporter), and drop sessions of attempts a newer attempt replaced."""
        by_job: dict[tuple[int, str], list[SessionDir]] = {}
        for name in list_session_names(self.state_fd):
            if parse_session_name(name) is None:
                if not name.startswith("."):
                    log.warning("ignoring %s/%s: not a session directory", self.state_path, name)
                continue
            try:
                sdir = open_session(self.state_fd, self.state_path, name)
            except SessionError as exc:
                log.error("refusing %s; leaving it in place for inspection", exc)
                continue
            except OSError as exc:
                log.error("cannot open session %s/%s: %s", self.state_path, name, exc)
                continue
            by_job.setdefault((sdir.job_id, sdir.step), []).append(sdir)
        for _job_id, dirs in sorted(by_job.items()):
            dirs.sort(key=lambda d: d.attempt)
            for old in dirs[:-1]:
                log.info("session %s is an older attempt than %s: dropping it", old.path, dirs[-1].path)
                self._adopt(old, report=False)
            self._adopt(dirs[-1], report=True)

    def _adopt(self, sdir: SessionDir, report: bool) -> None:
        try:
            read_launch(sdir)
        except (SessionError, OSError) as exc:
            log.error("refusing session %s: %s; leaving it in place for inspection", sdir.path, exc)
            sdir.close()
            return
        session = Session(sdir.job_id, sdir.attempt, sdir, state="running", report=report, adopted=True, step=sdir.step)
        session.ready.set()
        if not report:
            session.cancel_wanted = True
        try:
            status = protocol.call(session.socket_path, {"op": "status"}, timeout=3)
        except protocol.SupervisorUnreachable:
            status = None
        if status is not None and status.get("ok"):
            session.supervisor_pid = int(status.get("pid") or 0)
            if status.get("state") == "finished" and isinstance(status.get("result"), dict):
                session.result = status["result"]
                log.info(
                    "job %d attempt %d ended while spurd was down: %s exit_code=%s signal=%s (supervisor pid %d "
                    "holds the result)",
                    session.job_id,
                    session.attempt,
                    session.result.get("state"),
                    session.result.get("exit_code"),
                    session.result.get("signal"),
                    session.supervisor_pid,
                )
            else:
                log.info(
                    "re-adopted job %d attempt %d: supervisor pid %d, job still running",
                    session.job_id,
                    session.attempt,
                    session.supervisor_pid,
                )
        else:
            try:
                record = sdir.read_record_if_present(SUPERVISOR_FILE, "supervisor") or {}
            except (SessionError, OSError):
                record = {}
            session.supervisor_pid = int(record.get("pid") or 0)
            session.result = self._without_socket(session)
            if session.result is None:
                log.info(
                    "re-adopted job %d attempt %d: supervisor pid %d is alive but its socket does not answer yet",
                    session.job_id,
                    session.attempt,
                    session.supervisor_pid,
                )
            else:
                log.info(
                    "job %d attempt %d ended while spurd was down: %s exit_code=%s signal=%s",
                    session.job_id,
                    session.attempt,
                    session.result.get("state"),
                    session.result.get("exit_code"),
                    session.result.get("signal"),
                )
        with self.lock:
            self.sessions[session.key] = session
        if session.result is not None:
            self._finished(session, session.result)
        else:
            threading.Thread(
                target=self._watch, args=(session,), name=f"watch-{session.job_id}.{session.attempt}", daemon=True
            ).start()
