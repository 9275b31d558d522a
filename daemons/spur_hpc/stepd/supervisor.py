"""The supervisor of one job attempt: start the batch script, wait for it, enforce its limits, keep its result.

The supervisor is the job's parent (and a child subreaper), so it learns the exit status from wait()
rather than guessing from /proc, and every orphan the job leaves is re-parented to it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import select
import signal
import threading
import time
from typing import Any

from spur_hpc.model import CANCELLED, COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT
from spur_hpc.stepd import jobspec
from spur_hpc.stepd.enforce import EnforcementError, Enforcer
from spur_hpc.stepd.jobspec import SCRIPT_FD, Identity
from spur_hpc.stepd.session import (
    LAUNCH_FILE,
    RESULT_FILE,
    SCRIPT_FILE,
    SUPERVISOR_FILE,
    SessionDir,
    SessionError,
    proc_start_ticks,
)
from spur_hpc.stepd.tracking import CgroupTracker, ProcessTreeTracker, Tracker, find_cgroup2_mount

log = logging.getLogger("spurstepd")

DEFAULT_KILL_WAIT_SECS = 5.0  # SIGTERM -> SIGKILL grace on cancel and time limit (Slurm's KillWait)
LEFTOVER_WAIT_SECS = 5.0


def read_launch(session: SessionDir) -> tuple[dict[str, Any], bytes]:
    """The launch record and script of a session, checked against each other and the directory name."""
    launch = session.read_record(LAUNCH_FILE, "launch")
    where = f"{session.path}/{LAUNCH_FILE}"
    for key, kind in (("job_id", int), ("attempt", int), ("node", str), ("spec", dict), ("script_sha256", str)):
        if not isinstance(launch.get(key), kind):
            raise SessionError(f"{where}: field {key!r} is missing or not a {kind.__name__}")
    if (launch["job_id"], launch["attempt"]) != (session.job_id, session.attempt):
        raise SessionError(
            f"{where} describes job {launch['job_id']} attempt {launch['attempt']}, not the session's {session.name}"
        )
    script = session.read_bytes(SCRIPT_FILE)
    if hashlib.sha256(script).hexdigest() != launch["script_sha256"]:
        raise SessionError(f"{session.path}/{SCRIPT_FILE} does not match the checksum in {LAUNCH_FILE}")
    return launch, script


class Supervisor:
    def __init__(
        self,
        session: SessionDir,
        stopping: threading.Event,
        kill_wait: float = DEFAULT_KILL_WAIT_SECS,
        use_cgroup: bool = True,
    ) -> None:
        self.session = session
        self.stopping = stopping
        self.kill_wait = kill_wait
        self.use_cgroup = use_cgroup
        self.launch: dict[str, Any] = {}
        self.script = b""
        self.ident: Identity | None = None
        self.tracker: Tracker = ProcessTreeTracker()
        self.enforcer: Enforcer | None = None
        self._oom_kills = 0
        self.job_pid = 0
        self.start_time = 0.0
        self.setup_error = ""
        self.result: dict[str, Any] | None = None
        self.released = threading.Event()
        self._cond = threading.Condition()
        self._cancel_reason = ""
        self._signals: list[int] = []
        self._suspends: list[bool] = []  # scontrol suspend (False) / resume (True), in order, for the run loop
        self._suspended = False  # stopped by scontrol suspend now
        self._timed_out = False
        self._terminating = False
        self._kill_at: float | None = None
        self._job_status: int | None = None
        self._pidfd = -1
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def job_id(self) -> int:
        return self.session.job_id

    @property
    def attempt(self) -> int:
        return self.session.attempt

    # -------------------------------------------------------------- preparing

    def prepare(self) -> None:
        """Read and check the launch; choose how to track the job's processes. Raises SessionError/InvalidJob."""
        self.launch, self.script = read_launch(self.session)
        spec = self.launch["spec"]
        self.ident = jobspec.check_launch(self.job_id, self.attempt, self.script.decode("utf-8", "replace"), spec)
        if not self.ident.switch and os.geteuid() != self.ident.uid:
            log.warning(
                "job %d asks for user %s but spurstepd is not root: it runs as uid %d",
                self.job_id,
                self.ident.user,
                os.geteuid(),
            )
        self.tracker = self._choose_tracker()

    def _choose_tracker(self) -> Tracker:
        tracker = self._tracker()
        # The limits of the allocation ([cgroup]); EnforcementError (required = true) refuses the launch.
        self.enforcer = Enforcer(
            self.launch, os.path.dirname(self.session.path), self.job_id, self.attempt, self.session.step
        )
        try:
            self.enforcer.install(getattr(tracker, "path", ""))
        except EnforcementError:
            self.enforcer.cleanup()  # a refused launch leaves no cgroup behind
            tracker.cleanup()
            raise
        return tracker

    def _tracker(self) -> Tracker:
        if not self.use_cgroup:
            log.info("job %d: cgroups disabled on the command line; tracking the job by its process tree", self.job_id)
            return ProcessTreeTracker()
        mount = find_cgroup2_mount()
        if mount is None:
            log.info("job %d: no cgroup2 mount in /proc/mounts; tracking the job by its process tree", self.job_id)
            return ProcessTreeTracker()
        try:
            state_dir = os.path.dirname(self.session.path)
            tracker = CgroupTracker.create(
                mount, self.launch["node"], state_dir, self.job_id, self.attempt, self.session.step
            )
        except OSError as exc:
            log.info(
                "job %d: cannot create a cgroup under %s (%s); tracking the job by its process tree",
                self.job_id,
                mount,
                exc.strerror,
            )
            return ProcessTreeTracker()
        return tracker

    # -------------------------------------------------------------- starting

    def spawn(self) -> None:
        """Fork the job. Must run before any thread exists: the child runs Python code until exec."""
        assert self.ident is not None
        spec = self.launch["spec"]
        env = jobspec.job_environment(self.launch, self.ident)
        argv = jobspec.script_command(self.script, self.launch["spec"].get("argv") or ())
        stdout, stderr = jobspec.output_paths(
            self.job_id, spec, self.ident, self.launch["node"], **jobspec.array_fields(self.launch)
        )
        work_dir = jobspec.work_dir(spec, self.ident)
        umask = jobspec.job_umask(env)
        # The script lives in a 0700 root-only directory; the job reads its copy from a memfd instead,
        # so the session directory never has to be opened up to the job's user.
        memfd = os.memfd_create(f"spur-job-{self.job_id}", os.MFD_CLOEXEC)
        os.write(memfd, self.script)
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the job, until exec
            try:
                self._exec_job(memfd, go_r, err_w, argv, env, work_dir, stdout, stderr, umask)
            finally:
                os._exit(1)
        os.close(go_r)
        os.close(err_w)
        os.close(memfd)
        self.job_pid = pid
        self._pidfd = os.pidfd_open(pid)
        try:
            self.tracker.place(pid)
        except OSError as exc:
            log.warning(
                "job %d: cannot move pid %d into %s (%s); tracking the job by its process tree",
                self.job_id,
                pid,
                self.tracker.describe(),
                exc.strerror,
            )
            self.tracker.cleanup()
            self.tracker = ProcessTreeTracker()
        if self.enforcer is not None:
            self.enforcer.place(pid)
        os.write(go_w, b"1")  # the child may go on: it is tracked now
        os.close(go_w)
        message = b""
        while chunk := os.read(err_r, 4096):
            message += chunk
        os.close(err_r)
        self.start_time = time.time()
        self._start_mono = time.monotonic()
        if message:
            self.setup_error = message.decode("utf-8", "replace")
            log.error("job %d attempt %d could not start: %s", self.job_id, self.attempt, self.setup_error)
        else:
            log.info(
                "job %d attempt %d started: pid %d as %s (uid %d), %s, output %s, tracked by %s",
                self.job_id,
                self.attempt,
                pid,
                self.ident.user,
                self.ident.uid,
                " ".join(argv),
                stdout,
                self.tracker.describe(),
            )

    def _exec_job(
        self,
        memfd: int,
        go_r: int,
        err_w: int,
        argv: list[str],
        env: dict[str, str],
        work_dir: str,
        stdout: str,
        stderr: str,
        umask: int,
    ) -> None:
        assert self.ident is not None
        # Keep our two descriptors above the range the job uses, so dup2 onto 0..3 cannot clobber them.
        err = fcntl.fcntl(err_w, fcntl.F_DUPFD_CLOEXEC, 256)
        script = fcntl.fcntl(memfd, fcntl.F_DUPFD_CLOEXEC, 257)
        step = "start"
        try:
            os.setsid()  # its own session and process group, away from the supervisor's
            os.read(go_r, 1)  # wait until the supervisor has put us in the job's cgroup
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            os.dup2(script, SCRIPT_FD, inheritable=True)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0, inheritable=True)
            if self.ident.switch:
                step = f"switch to user {self.ident.user} (uid {self.ident.uid}, gid {self.ident.gid})"
                os.setgroups(list(self.ident.groups))
                os.setgid(self.ident.gid)
                os.setuid(self.ident.uid)
            os.umask(umask)
            step = f"enter work_dir {work_dir}"
            os.chdir(work_dir)
            # Output is opened as the job's user, so a job cannot make root write where the user may not.
            step = f"open stdout {stdout}"
            # --open-mode=append keeps what an earlier run (a requeue, a previous job) wrote; Slurm truncates
            # by default.
            keep = 0 if self.launch["spec"].get("open_mode") == "append" else os.O_TRUNC
            out = os.open(stdout, os.O_WRONLY | os.O_CREAT | keep | os.O_APPEND, 0o666)
            if stderr == stdout:
                err_fd = out
            else:
                step = f"open stderr {stderr}"
                err_fd = os.open(stderr, os.O_WRONLY | os.O_CREAT | keep | os.O_APPEND, 0o666)
            os.dup2(out, 1, inheritable=True)
            os.dup2(err_fd, 2, inheritable=True)
            os.closerange(SCRIPT_FD + 1, err)
            os.closerange(err + 1, 65536)
            step = f"run {argv[0]}"
            os.execve(argv[0], argv, env)
        except OSError as exc:
            os.write(err, f"{step}: {exc.strerror or exc}".encode())
        except BaseException as exc:  # anything at all must reach the supervisor, never a traceback
            os.write(err, f"{step}: {type(exc).__name__}: {exc}".encode())
        os._exit(1)

    def supervisor_record(self) -> dict[str, Any]:
        me = os.getpid()
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "pid": me,
            "start_ticks": proc_start_ticks(me) or 0,
            "job_pid": self.job_pid,
            "job_start_ticks": proc_start_ticks(self.job_pid) or 0,
            "tracking": self.tracker.method,
            "cgroup": getattr(self.tracker, "path", ""),
            "start_time": self.start_time,
        }

    def write_supervisor_record(self) -> None:
        self.session.write_record(SUPERVISOR_FILE, "supervisor", self.supervisor_record())

    # -------------------------------------------------------------- control requests (other threads)

    def request_signal(self, sig: int) -> bool:
        """Queue a signal (0 = cancel); False when the job has already ended."""
        with self._cond:
            if self.result is not None or self._job_status is not None:
                return False
            if sig == 0:
                self._cancel_reason = self._cancel_reason or "cancel requested"
            else:
                self._signals.append(sig)
        self._wake()
        return True

    def request_suspend(self, resume: bool) -> bool:
        """Queue scontrol suspend (SIGSTOP to every process of the job, its time limit held) or resume
        (SIGCONT, the limit moved on by the time suspended); False when the job has already ended."""
        with self._cond:
            if self.result is not None or self._job_status is not None:
                return False
            self._suspends.append(resume)
        self._wake()
        return True

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"w")
        except BlockingIOError:
            pass  # already has a wake-up pending

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "ok": True,
                "job_id": self.job_id,
                "attempt": self.attempt,
                "pid": os.getpid(),
                "job_pid": self.job_pid,
                "state": "finished" if self.result is not None else "running",
                "tracking": self.tracker.describe(),
                "start_time": self.start_time,
                "result": dict(self.result) if self.result is not None else None,
            }

    def wait_finished(self, timeout: float) -> dict[str, Any]:
        with self._cond:
            self._cond.wait_for(lambda: self.result is not None, timeout=timeout)
        return self.status()

    def release(self) -> dict[str, Any]:
        with self._cond:
            if self.result is None:
                return {"ok": False, "error": f"job {self.job_id} is still running; cancel it first"}
        return {"ok": True}

    def after_reply(self, request: dict[str, Any]) -> None:
        if request.get("op") == "release":
            self.released.set()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "wait":
            timeout = request.get("timeout", 30)
            return self.wait_finished(min(float(timeout), 300.0) if isinstance(timeout, int | float) else 30.0)
        if op == "signal":
            sig = request.get("signal")
            if not isinstance(sig, int) or sig < 0 or sig >= signal.NSIG:
                return {"ok": False, "error": f"bad signal {sig!r}"}
            return {"ok": True, "delivered": self.request_signal(sig)}
        if op == "suspend":
            return {"ok": True, "delivered": self.request_suspend(bool(request.get("resume")))}
        if op == "release":
            return self.release()
        return {"ok": False, "error": f"unknown op {op!r}"}

    # -------------------------------------------------------------- running

    def run(self) -> dict[str, Any]:
        """Supervise the job until its main process ends; then clean up its tree and record the result."""
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD wakes the select below
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        limit = int(self.launch["spec"].get("time_limit_secs") or 0)
        deadline = self._start_mono + limit if limit > 0 else None
        warn_at = self._signal_time(deadline)  # --signal: its signal this long before the limit
        suspended_at: float | None = None  # monotonic time of scontrol suspend, while the job is stopped
        while self._reap() is None:
            now = time.monotonic()
            with self._cond:
                cancel_reason, signals, self._signals = self._cancel_reason, self._signals, []
                suspends, self._suspends = self._suspends, []
            for resume in suspends:
                if resume and suspended_at is not None:
                    paused = now - suspended_at  # the limit (and --signal's warning) move on by the time stopped
                    deadline = None if deadline is None else deadline + paused
                    warn_at = None if warn_at is None else warn_at + paused
                    suspended_at = None
                    self._suspended = False
                    done = self.tracker.stop(False)
                    log.info("job %d: resumed after %.1f s (%s)", self.job_id, paused, done)
                elif not resume and suspended_at is None and not self._terminating:
                    suspended_at, self._suspended = now, True
                    log.info("job %d: suspended (%s)", self.job_id, self.tracker.stop(True))
            if self.stopping.is_set() and not cancel_reason:
                cancel_reason = "spurstepd was asked to stop"
                with self._cond:
                    self._cancel_reason = cancel_reason
            if cancel_reason and not self._terminating:
                self._terminate(f"{cancel_reason}")
            if warn_at is not None and now >= warn_at and not self._terminating and suspended_at is None:
                self._send_limit_signal()
                warn_at = None
            if deadline is not None and now >= deadline and not self._terminating and suspended_at is None:
                self._timed_out = True
                self._terminate(f"time limit of {limit} s reached")
            if self._kill_at is not None and now >= self._kill_at:
                log.info(
                    "job %d: still running %.1f s after SIGTERM: sending SIGKILL to the whole tree",
                    self.job_id,
                    self.kill_wait,
                )
                self.tracker.kill_all()
                self._kill_at = now + 1.0  # and again, should anything survive
            self._check_oom()
            for sig in signals:
                count = self.tracker.signal(sig)
                log.info("job %d: delivered signal %d to %d processes", self.job_id, sig, count)
            waits = [1.0]
            if deadline is not None and not self._terminating and suspended_at is None:
                waits.append(deadline - now)
            if warn_at is not None and suspended_at is None:
                waits.append(warn_at - now)
            if self._kill_at is not None:
                waits.append(self._kill_at - now)
            select.select([self._pidfd, self._wake_r], [], [], max(0.0, min(waits)))
            self._drain_wake()
        return self._finish()

    def _signal_time(self, deadline: float | None) -> float | None:
        """When --signal's signal is due (monotonic): signal_secs before the time limit, at once when the limit
        is shorter than that; None without --signal or a limit."""
        spec = self.launch["spec"]
        if deadline is None or not spec.get("signal_number"):
            return None
        return max(self._start_mono, deadline - int(spec.get("signal_secs") or 0))

    def _send_limit_signal(self) -> None:
        """--signal=[B:]SIG@secs, as Slurm: with B: the batch shell alone, else every process of the job but the
        batch shell (Slurm signals the job's steps, not the shell)."""
        spec = self.launch["spec"]
        sig = int(spec["signal_number"])
        if spec.get("signal_batch_only"):
            try:
                os.kill(self.job_pid, sig)
                count = 1
            except ProcessLookupError:
                count = 0
        else:
            count = self.tracker.signal(sig, exclude=self.job_pid)
        log.info(
            "job %d: %d s before its time limit: sent signal %d to %s (%d processes)",
            self.job_id,
            int(spec.get("signal_secs") or 0),
            sig,
            "the batch shell" if spec.get("signal_batch_only") else "the job's processes but the batch shell",
            count,
        )

    def _terminate(self, why: str) -> None:
        log.info(
            "job %d attempt %d: %s: sending SIGTERM to %s", self.job_id, self.attempt, why, self.tracker.describe()
        )
        self._terminating = True
        if self._suspended:  # a frozen cgroup delivers no signal until it thaws
            self.tracker.stop(False)
            self._suspended = False
        self.tracker.signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
        self.tracker.signal(signal.SIGTERM)
        self._kill_at = time.monotonic() + self.kill_wait

    def _check_oom(self) -> None:
        """A new OOM kill in the job's cgroup: with [cgroup] oom_kill_job, the whole job goes with it."""
        if self.enforcer is None:
            return
        kills = self.enforcer.oom_kills()
        if kills <= self._oom_kills:
            return
        self._oom_kills = kills
        log.warning("job %d: %s", self.job_id, self._oom_line())
        if self.enforcer.plan.settings.get("oom_kill_job"):
            self.tracker.kill_all()
            self.enforcer.kill_all()

    def _oom_line(self) -> str:
        step = self.session.step or "batch"
        return f"Detected {self._oom_kills} oom-kill event(s) in StepId={self.job_id}.{step} cgroup"

    def _oom_reason(self) -> str:
        """The reason of an OUT_OF_MEMORY end when the OOM killer struck in the job's cgroup, else "". As in
        Slurm, a cancel or a time limit keeps its own state; the exit code is the script's."""
        if self.enforcer is not None:
            self._oom_kills = max(self._oom_kills, self.enforcer.oom_kills())
        return self._oom_line() if self._oom_kills else ""

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> int | None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == self.job_pid:
                self._job_status = status
        return self._job_status

    def _finish(self) -> dict[str, Any]:
        status = self._job_status
        assert status is not None
        end_time = time.time()
        if self.tracker.alive():
            # As in Slurm, a batch job ends with its script: whatever it left running goes with it.
            log.info("job %d: main process ended; killing what is left in %s", self.job_id, self.tracker.describe())
            self.tracker.kill_all()
            end = time.monotonic() + LEFTOVER_WAIT_SECS
            while self.tracker.alive() and time.monotonic() < end:
                self._reap()
                time.sleep(0.02)
        self._reap()
        oom_reason = self._oom_reason()  # read before the cgroup goes
        self.tracker.cleanup()
        if self.enforcer is not None:
            self.enforcer.cleanup()
        os.close(self._pidfd)
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        if self._cancel_reason:
            state = CANCELLED
        elif self._timed_out:
            state = TIMEOUT
        elif os.WIFEXITED(status) and exit_code == 0:
            state = COMPLETED
        else:
            state = FAILED
        reason = self.setup_error or self._cancel_reason or ("time limit" if self._timed_out else "")
        if oom_reason and state in (COMPLETED, FAILED):
            state, reason = OUT_OF_MEMORY, reason or oom_reason
        result = {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "state": state,
            "exit_code": exit_code,
            "signal": sig,
            "start_time": self.start_time,
            "end_time": end_time,
            "reason": reason,
        }
        try:
            self.session.write_record(RESULT_FILE, "result", result)
        except OSError as exc:
            # The result stays in memory and on the socket; spurd reports it from there.
            log.error("job %d: cannot write %s/%s: %s", self.job_id, self.session.path, RESULT_FILE, exc)
        with self._cond:
            self.result = result
            self._cond.notify_all()
        log.info(
            "job %d attempt %d ended: %s exit_code=%d signal=%d%s",
            self.job_id,
            self.attempt,
            state,
            exit_code,
            sig,
            f" ({reason})" if reason else "",
        )
        return result

    def hold_result(self) -> None:
        """Keep the result until spurd collects it (release), or until asked to stop (it stays on disk)."""
        while not self.released.wait(0.5):
            self._reap()
            if self.stopping.is_set():
                log.info(
                    "job %d: stopping; the result stays in %s/%s for spurd", self.job_id, self.session.path, RESULT_FILE
                )
                return
        log.info("job %d attempt %d: result collected by spurd; exiting", self.job_id, self.attempt)
