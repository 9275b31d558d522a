"""spurstepd: the supervisor of one job attempt, started by spurd and detached from it.

spurd runs `spurstepd --session <state_dir>/<job>.<attempt>` with stdout on a pipe. spurstepd forks
once more and starts a new session, so it is nobody's child (spurd reaps the short-lived first process
at once, and neither a stop nor a kill -9 of spurd reaches the supervisor). When the job runs, it
writes one handshake line on that pipe: {"ok": true, "pid": <supervisor pid>} or {"ok": false,
"error": "..."}; then it serves the session's control socket until spurd has collected the result.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from spur_hpc.daemon import EXIT_OK, Daemon, StartupError
from spur_hpc.stepd.jobspec import InvalidJob
from spur_hpc.stepd.protocol import ControlServer
from spur_hpc.stepd.session import SOCKET_FILE, SessionDir, SessionError, open_session_path
from spur_hpc.stepd.supervisor import DEFAULT_KILL_WAIT_SECS, Supervisor
from spur_hpc.stepd.tasks import StepSupervisor
from spur_hpc.stepd.tracking import become_subreaper


class SupervisorDaemon(Daemon):
    program = "spurstepd"
    description = "Spur per-job supervisor (started by spurd; not meant to be run by hand)"

    def __init__(self) -> None:
        super().__init__()
        self.session: SessionDir | None = None
        self.supervisor: Supervisor | None = None
        self.control: ControlServer | None = None
        self._handshake_done = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--session", required=True, help="session directory <state_dir>/<job_id>.<attempt>")
        parser.add_argument("--foreground", action="store_true", help="do not detach (for debugging)")
        parser.add_argument(
            "--kill-wait",
            type=float,
            default=DEFAULT_KILL_WAIT_SECS,
            help="seconds between SIGTERM and SIGKILL on cancel or time limit",
        )
        parser.add_argument(
            "--no-cgroup",
            action="store_true",
            help="track the job by its process tree even where a cgroup could be created",
        )

    def _handshake(self, message: dict[str, Any]) -> None:
        """Tell spurd (reading our stdout) how the start went, then let go of the pipe."""
        if self._handshake_done:
            return
        self._handshake_done = True
        try:
            os.write(1, json.dumps(message).encode() + b"\n")
        except OSError:
            pass  # spurd is gone; the session on disk says everything it needs
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)

    def configure(self, args: argparse.Namespace) -> None:
        if not args.foreground:
            # Second fork: the first process exits at once so spurd can reap it; this one is nobody's child.
            if os.fork() > 0:
                os._exit(EXIT_OK)
            os.setsid()
        os.umask(0o077)  # everything this process creates is for root's eyes only
        become_subreaper()
        try:
            self.session = open_session_path(args.session)
            kind = StepSupervisor if self.session.step else Supervisor  # <job>.<attempt>.<step>: an srun step
            self.supervisor = kind(self.session, self.stopping, args.kill_wait, not args.no_cgroup)
            self.supervisor.prepare()
        except (SessionError, InvalidJob, OSError) as exc:
            self.log.error("refusing session %s: %s", args.session, exc)
            self._handshake({"ok": False, "error": str(exc)})
            raise StartupError(str(exc)) from None

    def start(self) -> None:
        assert self.supervisor is not None and self.session is not None
        try:
            self.control = ControlServer.bind(
                self.session.fd_path(SOCKET_FILE), self.supervisor.handle, self.supervisor.after_reply
            )
            self.supervisor.spawn()
            self.supervisor.write_supervisor_record()
        except OSError as exc:
            self.log.error("job %d: cannot start: %s", self.supervisor.job_id, exc)
            self._handshake({"ok": False, "error": f"cannot start job {self.supervisor.job_id}: {exc}"})
            raise StartupError(str(exc)) from None
        self.control.start()  # threads only now: spawn() forks and must run single-threaded
        self._handshake({"ok": True, "pid": os.getpid(), "job_pid": self.supervisor.job_pid})

    def wait(self) -> None:
        assert self.supervisor is not None
        self.supervisor.run()
        self.supervisor.hold_result()

    def stop(self) -> None:
        if self.control is not None:
            self.control.close()
        if self.session is not None:
            self.session.close()


def main(argv: list[str] | None = None) -> int:
    return SupervisorDaemon().main(argv)
