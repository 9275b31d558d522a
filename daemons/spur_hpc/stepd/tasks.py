"""spurstepd in step mode: one node's part of a job step (srun), its tasks and their I/O.

The session <state_dir>/<job>.<attempt>.<step> names the step; its launch record's "step" says which task
ids run here (SLURM_PROCID), the command, and where srun listens. The supervisor forks every task as the
job's user (stdin /dev/null), connects to srun's listener, sends the token first (stepio.HELLO), then each
task's stdout/stderr as frames and one EXIT frame per task. With --output/--error the tasks write files
(model.output_file's patterns, %t the task) and only the EXIT frames travel. If srun is gone or never
answers, the tasks still run and their streamed output is dropped: the step's end is what the controller
records, through spurd, like a batch job's.

Its life is the batch supervisor's (supervisor.Supervisor): the same control socket, the same result
record, the same re-adoption by a restarted spurd; only what it runs differs.
"""

from __future__ import annotations

import fcntl
import logging
import os
import select
import signal
import socket
import threading
import time
from typing import Any

from spur_hpc import model, stepio
from spur_hpc.model import CANCELLED, COMPLETED, FAILED, OUT_OF_MEMORY, TIMEOUT
from spur_hpc.stepd import jobspec
from spur_hpc.stepd.session import RESULT_FILE, SessionError
from spur_hpc.stepd.supervisor import LEFTOVER_WAIT_SECS, Supervisor, read_launch
from spur_hpc.stepd.tracking import ProcessTreeTracker

log = logging.getLogger("spurstepd")

CONNECT_SECS = 10.0  # how long a supervisor tries to reach srun's listener
# How long the step's end waits for the I/O thread to deliver the last output and the EXIT frames: srun must
# have its tasks' statuses before the controller records the step as ended (it takes a step that ended with
# no status from a task as a failure).
IO_DRAIN_SECS = CONNECT_SECS + 5.0
READ_CHUNK = stepio.MAX_PAYLOAD


def step_environment(launch: dict[str, Any], ident: jobspec.Identity) -> dict[str, str]:
    """srun's environment, the job's SLURM_* variables, and the step's (SLURM_STEP_*, SLURM_NODEID ...);
    the per-task ones (SLURM_PROCID, SLURM_LOCALID) are task_environment's."""
    step = launch["step"]
    spec = dict(launch["spec"], environment=step["environment"])
    env = jobspec.job_environment(dict(launch, spec=spec), ident)
    nodes = list(step["nodes"])
    env.update(
        {
            "SLURM_STEP_ID": step["step_id"],
            "SLURM_STEPID": step["step_id"],
            "SLURM_STEP_NUM_TASKS": str(step["tasks"]),
            "SLURM_STEP_NUM_NODES": str(len(nodes)),
            "SLURM_STEP_NODELIST": model.compress_hostlist(nodes),
            "SLURM_STEP_TASKS_PER_NODE": str(len(step["task_ids"])),
            "SLURM_NTASKS": str(step["tasks"]),
            "SLURM_NPROCS": str(step["tasks"]),
            "SLURM_NNODES": str(len(nodes)),
            "SLURM_NODELIST": model.compress_hostlist(nodes),
            "SLURM_NODEID": str(step["node_index"]),
            "SLURM_CPUS_PER_TASK": str(max(1, step["cpus_per_task"])),
            "SLURM_JOB_NAME": launch["spec"].get("name") or model.DEFAULT_JOB_NAME,
            "SLURMD_NODENAME": launch["node"],
        }
    )
    env.pop("ENVIRONMENT", None)  # BATCH describes the batch script only
    return env


def task_environment(base: dict[str, str], task: int, local: int) -> dict[str, str]:
    env = dict(base)
    env.update({"SLURM_PROCID": str(task), "SLURM_LOCALID": str(local), "SLURM_TASK_PID": ""})
    return env


class StepSupervisor(Supervisor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.step: dict[str, Any] = {}
        self.task_pids: dict[int, int] = {}  # pid -> task id
        self.task_status: dict[int, int] = {}  # task id -> wait status
        self.outputs: dict[int, tuple[int, int]] = {}  # fd -> (stream kind, task id)
        self._bad_exit = ""
        self._never_w = -1
        self._io_lock = threading.Lock()
        self._io_wake_r, self._io_wake_w = os.pipe()
        os.set_blocking(self._io_wake_r, False)
        os.set_blocking(self._io_wake_w, False)
        self._io_thread: threading.Thread | None = None

    # -------------------------------------------------------------- preparing

    def prepare(self) -> None:
        self.launch, self.script = read_launch(self.session)
        step = self.launch.get("step")
        if not isinstance(step, dict) or str(step.get("step_id")) != self.session.step:
            raise SessionError(f"{self.session.path}: its launch record describes no step {self.session.step}")
        self.step = step
        self.ident = jobspec.check_step_launch(self.job_id, self.attempt, self.launch["spec"], step)
        # A step has no time limit or --signal of its own: the job's are the batch supervisor's (or the
        # controller's, for an interactive allocation), which end the job and so the step.
        self.launch["spec"] = dict(self.launch["spec"], time_limit_secs=0, signal_number=0)
        self.tracker = self._choose_tracker()

    # -------------------------------------------------------------- starting

    def spawn(self) -> None:
        """Fork every task of this node, then start the I/O thread. Must run before any other thread exists."""
        assert self.ident is not None
        step = self.step
        base_env = step_environment(self.launch, self.ident)
        work_dir = step["work_dir"]
        umask = jobspec.job_umask(base_env)
        streaming = not (step["stdout_path"] or step["stderr_path"])
        opened: set[str] = set()
        # run() selects on _pidfd for the job's end; a step ends when every task has (SIGCHLD wakes run()),
        # so it gets a descriptor that never becomes readable.
        self._pidfd, self._never_w = os.pipe()
        problems = []
        for local, task in enumerate(step["task_ids"]):
            env = task_environment(base_env, task, local)
            if streaming:
                out_r, out_w = os.pipe()
                err_r, err_w = os.pipe()
                files: tuple[Any, Any] = (out_w, err_w)
            else:
                stdout, stderr = self._output_paths(task)
                files = (stdout, stderr)
            pid, problem = self._fork_task(step["argv"], env, work_dir, umask, files, opened)
            if streaming:
                os.close(out_w)
                os.close(err_w)
                self.outputs[out_r] = (stepio.STDOUT, task)
                self.outputs[err_r] = (stepio.STDERR, task)
            else:
                opened.update(files)
            self.task_pids[pid] = task
            if problem:
                problems.append(f"task {task}: {problem}")
        self.job_pid = next(iter(self.task_pids), 0)
        self.start_time = time.time()
        self._start_mono = time.monotonic()
        if problems:
            self.setup_error = "; ".join(problems)[:2000]
            log.error("step %d.%s could not start: %s", self.job_id, step["step_id"], self.setup_error)
        else:
            log.info(
                "step %d.%s attempt %d: tasks %s started as %s (uid %d): %s, tracked by %s",
                self.job_id,
                step["step_id"],
                self.attempt,
                step["task_ids"],
                self.ident.user,
                self.ident.uid,
                " ".join(step["argv"])[:200],
                self.tracker.describe(),
            )
        self._io_thread = threading.Thread(target=self._io_loop, name="step-io", daemon=True)
        self._io_thread.start()

    def _output_paths(self, task: int) -> tuple[str, str]:
        assert self.ident is not None
        spec = dict(self.launch["spec"], stdout_path=self.step["stdout_path"], stderr_path=self.step["stderr_path"])
        return jobspec.output_paths(
            self.job_id,
            spec,
            self.ident,
            self.launch["node"],
            **jobspec.array_fields(self.launch),
            step=self.step["step_id"],
            task=task,
            node_index=self.step["node_index"],
        )

    def _fork_task(
        self, argv: list[str], env: dict[str, str], work_dir: str, umask: int, files: tuple, opened: set[str]
    ) -> tuple[int, str]:
        go_r, go_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self._exec_task(go_r, err_w, argv, env, work_dir, umask, files, opened)
            finally:
                os._exit(1)
        os.close(go_r)
        os.close(err_w)
        try:
            self.tracker.place(pid)
        except OSError as exc:
            log.warning("step %d: cannot move pid %d into %s (%s)", self.job_id, pid, self.tracker.describe(), exc)
            self.tracker.cleanup()
            self.tracker = ProcessTreeTracker()
        if self.enforcer is not None:
            self.enforcer.place(pid)
        os.write(go_w, b"1")
        os.close(go_w)
        message = b""
        while chunk := os.read(err_r, 4096):
            message += chunk
        os.close(err_r)
        return pid, message.decode("utf-8", "replace")

    def _exec_task(
        self,
        go_r: int,
        err_w: int,
        argv: list[str],
        env: dict[str, str],
        work_dir: str,
        umask: int,
        files: tuple,
        opened: set[str],
    ) -> None:
        assert self.ident is not None
        err = fcntl.fcntl(err_w, fcntl.F_DUPFD_CLOEXEC, 256)
        what = "start"
        try:
            os.setsid()
            os.read(go_r, 1)
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            if self.ident.switch:
                what = f"switch to user {self.ident.user} (uid {self.ident.uid}, gid {self.ident.gid})"
                os.setgroups(list(self.ident.groups))
                os.setgid(self.ident.gid)
                os.setuid(self.ident.uid)
            os.umask(umask)
            what = f"enter work_dir {work_dir}"
            os.chdir(work_dir)
            stdout, stderr = files
            if isinstance(stdout, str):
                # The first task of a node to name a file truncates it; the others append to it.
                what = f"open {stdout}"
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if stdout in opened else os.O_TRUNC)
                stdout = os.open(stdout, flags, 0o666)
                if files[1] == files[0]:
                    stderr = stdout
                else:
                    what = f"open {stderr}"
                    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if stderr in opened else os.O_TRUNC)
                    stderr = os.open(stderr, flags, 0o666)
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0, inheritable=True)
            os.dup2(stdout, 1, inheritable=True)
            os.dup2(stderr, 2, inheritable=True)
            os.closerange(3, err)
            os.closerange(err + 1, 65536)
            what = f"run {argv[0]}"
            os.execvpe(argv[0], argv, env)
        except OSError as exc:
            os.write(err, f"{what}: {exc.strerror or exc}".encode())
        except BaseException as exc:  # anything at all must reach the supervisor, never a traceback
            os.write(err, f"{what}: {type(exc).__name__}: {exc}".encode())
        os._exit(1)

    # -------------------------------------------------------------- tasks ending

    def _reap(self) -> int | None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            task = self.task_pids.get(pid)
            if task is not None and task not in self.task_status:
                self._task_ended(task, status)
        if self._job_status is None and len(self.task_status) == len(self.task_pids):
            self._job_status = 0
        return self._job_status

    def _task_ended(self, task: int, status: int) -> None:
        with self._io_lock:
            self.task_status[task] = status
        try:
            os.write(self._io_wake_w, b"x")
        except BlockingIOError:
            pass
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
        log.info(
            "step %d.%s: task %d ended (exit code %d, signal %d)",
            self.job_id,
            self.session.step,
            task,
            code,
            os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
        )
        bad = code != 0 or os.WIFSIGNALED(status)
        if bad and self.step.get("kill_on_bad_exit") and not self._terminating and not self._bad_exit:
            self._bad_exit = f"task {task} exited with code {code} (--kill-on-bad-exit)"
            self._terminate(self._bad_exit)

    def status(self) -> dict[str, Any]:
        out = super().status()
        out["step_id"] = self.session.step
        return out

    # -------------------------------------------------------------- I/O

    def _connect(self) -> socket.socket | None:
        host, port = model.split_host_port(self.step["io_address"])
        end = time.monotonic() + CONNECT_SECS
        error = "stopping"
        while time.monotonic() < end and not self.stopping.is_set():
            try:
                sock = socket.create_connection((host, port), timeout=5)
                sock.settimeout(30)
                sock.sendall(stepio.hello(self.step["io_token"], self.launch["node"], list(self.step["task_ids"])))
                return sock
            except OSError as exc:
                error = str(exc)
                time.sleep(0.5)
        log.warning(
            "step %d.%s: cannot reach srun at %s (%s); the tasks run on and their output is dropped",
            self.job_id,
            self.session.step,
            self.step["io_address"],
            error,
        )
        return None

    def _send(self, sock: socket.socket | None, data: bytes) -> socket.socket | None:
        if sock is None:
            return None
        try:
            sock.sendall(data)
            return sock
        except OSError as exc:
            log.warning(
                "step %d.%s: srun's connection is gone (%s); output is dropped from now on",
                self.job_id,
                self.session.step,
                exc,
            )
            sock.close()
            return None

    def _io_loop(self) -> None:
        """Stream every task's output to srun; send each task's EXIT frame once its streams are closed and it
        has ended. Ends when every task has had its EXIT frame."""
        sock = self._connect()
        open_fds = dict(self.outputs)
        sent: set[int] = set()
        tasks = list(self.step["task_ids"])
        poller = select.poll()
        for fd in [*open_fds, self._io_wake_r]:
            poller.register(fd, select.POLLIN)
        while len(sent) < len(tasks):
            ready = [fd for fd, _event in poller.poll(1000)]
            for fd in ready:
                if fd == self._io_wake_r:
                    try:
                        while os.read(fd, 512):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                kind, task = open_fds[fd]
                try:
                    data = os.read(fd, READ_CHUNK)
                except OSError:
                    data = b""
                if not data:
                    poller.unregister(fd)
                    os.close(fd)
                    del open_fds[fd]
                    continue
                sock = self._send(sock, stepio.frame(kind, task, data))
            with self._io_lock:
                ended = dict(self.task_status)
            streaming = {t for _kind, t in open_fds.values()}
            for task, status in ended.items():
                if task in sent or task in streaming:
                    continue
                code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
                sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
                sock = self._send(sock, stepio.exit_frame(task, code, sig))
                sent.add(task)
        if sock is not None:
            sock.close()

    # -------------------------------------------------------------- the end

    def _drain_io(self) -> None:
        """Let the I/O thread send what is left before the result exists: once spurd collects the result this
        process exits, and a daemon thread still connecting or sending would die with it."""
        thread = self._io_thread
        if thread is None:
            return
        thread.join(IO_DRAIN_SECS)
        if thread.is_alive():
            log.warning(
                "step %d.%s: srun still had not taken every task's output and status after %.0f s; ending without",
                self.job_id,
                self.session.step,
                IO_DRAIN_SECS,
            )

    def _finish(self) -> dict[str, Any]:
        end_time = time.time()
        if self.tracker.alive():
            log.info(
                "step %d.%s: every task ended; killing what is left in %s",
                self.job_id,
                self.session.step,
                self.tracker.describe(),
            )
            self.tracker.kill_all()
            end = time.monotonic() + LEFTOVER_WAIT_SECS
            while self.tracker.alive() and time.monotonic() < end:
                self._reap()
                time.sleep(0.02)
        self._reap()
        self._drain_io()
        oom_reason = self._oom_reason()  # read before the cgroup goes
        self.tracker.cleanup()
        if self.enforcer is not None:
            self.enforcer.cleanup()
        os.close(self._pidfd)
        os.close(self._never_w)
        codes = {t: (os.WEXITSTATUS(s) if os.WIFEXITED(s) else 0) for t, s in self.task_status.items()}
        sigs = {t: (os.WTERMSIG(s) if os.WIFSIGNALED(s) else 0) for t, s in self.task_status.items()}
        exit_code, sig = max(codes.values(), default=0), max(sigs.values(), default=0)
        if self._cancel_reason:
            state = CANCELLED
        elif self._timed_out:
            state = TIMEOUT
        elif exit_code == 0 and sig == 0 and not self.setup_error:
            state = COMPLETED
        else:
            state = FAILED
        if self.setup_error and exit_code == 0:
            exit_code = 1
        reason = self.setup_error or self._cancel_reason or self._bad_exit
        if oom_reason and state in (COMPLETED, FAILED):
            state, reason = OUT_OF_MEMORY, reason or oom_reason
        result = {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "step_id": self.session.step,
            "state": state,
            "exit_code": exit_code,
            "signal": sig,
            "start_time": self.start_time,
            "end_time": end_time,
            "reason": reason,
            "tasks": {str(t): {"exit_code": codes[t], "signal": sigs[t]} for t in sorted(codes)},
        }
        try:
            self.session.write_record(RESULT_FILE, "result", result)
        except OSError as exc:
            log.error(
                "step %d.%s: cannot write %s/%s: %s",
                self.job_id,
                self.session.step,
                self.session.path,
                RESULT_FILE,
                exc,
            )
        with self._cond:
            self.result = result
            self._cond.notify_all()
        log.info(
            "step %d.%s attempt %d ended: %s exit_code=%d signal=%d%s",
            self.job_id,
            self.session.step,
            self.attempt,
            state,
            exit_code,
            sig,
            f" ({reason})" if reason else "",
        )
        return result
