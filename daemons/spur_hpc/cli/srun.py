"""srun: run a job step, its tasks' output streamed back here.

Inside an allocation (SLURM_JOB_ID set, or --jobid) srun opens an I/O listener on this host, asks the
controller for a step (CreateStep: tasks, nodes, the command, the environment, the listener's address and
a random token), and then only listens: every spurstepd of the step connects back, sends the token first,
then its tasks' output and exit statuses (spur_hpc/stepio.py). srun exits with the largest exit code of
its tasks (128 + the signal for a task a signal killed).

Outside an allocation srun first asks for one, exactly as salloc does (an interactive job), runs the step
in it, and ends it when the step is over.

Ctrl-C sends SIGINT to every task (through the controller, which reaches each node's spurstepd); a second
Ctrl-C within a second cancels the step. Control calls follow the controllers' failover; the I/O is direct
to the nodes, so a failover does not interrupt it, and when no controller answers srun says so in one line
and goes on streaming.
"""

from __future__ import annotations

import os
import sys

from spur_hpc.cli.runner import CliError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROGRAM = "srun"
SYNOPSIS = "[OPTIONS] COMMAND [ARGS...]"
HELLO_TIMEOUT_SECS = 10.0  # a connection must show the token within this time
STATUS_POLL_SECS = 3.0  # how often srun asks the controller whether the step is still running
INTERRUPT_WINDOW_SECS = 1.0  # a second Ctrl-C within this aborts the step
MAX_CONNECTIONS = 4096  # connections held at once (one per node of the step, plus strays being refused)


def listen_address(controllers: list[str]):
    """A TCP listener on the address this host uses to reach the controllers (what the nodes can reach too)."""
    import socket

    from spur_hpc import model

    host, port = model.split_host_port(controllers[0])
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_DGRAM)
    try:
        probe.connect((host, port))  # no packet is sent: this only asks the kernel for the route's source
        local = probe.getsockname()[0]
    except OSError:
        local = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    finally:
        probe.close()
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((local, 0))
    listener.listen(128)
    listener.setblocking(False)
    return listener, model.join_host_port(local, listener.getsockname()[1])


class StepIO:
    """srun's side of the step's I/O: accept the spurstepds, check their token, write the tasks' output."""

    def __init__(self, listener, token: str, label: bool, out=None, err=None) -> None:
        import selectors

        from spur_hpc import stepio

        self.stepio = stepio
        self.listener = listener
        self.token = token
        self.label = label
        self.out = out or sys.stdout.buffer
        self.err = err or sys.stderr.buffer
        self.selector = selectors.DefaultSelector()
        self.selector.register(listener, selectors.EVENT_READ, None)
        self.conns: dict[Any, dict[str, Any]] = {}
        self.exits: dict[int, tuple[int, int, str]] = {}  # task -> (exit code, signal, node)
        self.labeler = stepio.LineLabeler()
        self.nodes_seen: set[str] = set()

    def set_tasks(self, tasks: int) -> None:
        self.labeler.width = len(str(max(0, tasks - 1)))

    def poll(self, timeout: float) -> None:
        import time

        for key, _events in self.selector.select(timeout):
            if key.fileobj is self.listener:
                self._accept()
            else:
                self._read(key.fileobj)
        now = time.monotonic()
        for conn, state in list(self.conns.items()):
            if not state["hello"] and now - state["since"] > HELLO_TIMEOUT_SECS:
                self._close(conn)

    def _accept(self) -> None:
        import selectors
        import time

        try:
            conn, _peer = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        if len(self.conns) >= MAX_CONNECTIONS:
            conn.close()
            return
        conn.setblocking(False)
        self.conns[conn] = {"reader": self.stepio.FrameReader(), "hello": None, "since": time.monotonic()}
        self.selector.register(conn, selectors.EVENT_READ, None)

    def _close(self, conn) -> None:
        state = self.conns.pop(conn, None)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
        if state and state["hello"] and self.label:
            for task in state["hello"]["tasks"]:
                for kind in (self.stepio.STDOUT, self.stepio.STDERR):
                    self._write(kind, self.labeler.flush(kind, task))

    def _read(self, conn) -> None:
        import hmac

        stepio = self.stepio
        try:
            data = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        state = self.conns[conn]
        try:
            frames = state["reader"].feed(data)
            for kind, task, payload in frames:
                if state["hello"] is None:
                    hello = stepio.read_json(payload, "hello") if kind == stepio.HELLO else {}
                    token = str(hello.get("token", ""))
                    if not hmac.compare_digest(token.encode(), self.token.encode()):
                        raise stepio.FrameError("a connection without this step's token")
                    tasks = hello.get("tasks")
                    if not isinstance(tasks, list) or not all(isinstance(t, int) for t in tasks):
                        raise stepio.FrameError("a hello without task ids")
                    state["hello"] = {"node": str(hello.get("node", "")), "tasks": tasks}
                    self.nodes_seen.add(state["hello"]["node"])
                elif kind in (stepio.STDOUT, stepio.STDERR):
                    if self.label:
                        payload = self.labeler.feed(kind, task, payload)
                    self._write(kind, payload)
                elif kind == stepio.EXIT:
                    status = stepio.read_json(payload, "exit")
                    if self.label:
                        for k in (stepio.STDOUT, stepio.STDERR):
                            self._write(k, self.labeler.flush(k, task))
                    self.exits[task] = (
                        int(status.get("exit_code", 0)),
                        int(status.get("signal", 0)),
                        state["hello"]["node"],
                    )
        except stepio.FrameError:
            self._close(conn)

    def _write(self, kind: int, data: bytes) -> None:
        if not data:
            return
        stream = self.out if kind == self.stepio.STDOUT else self.err
        try:
            stream.write(data)
            stream.flush()
        except BrokenPipeError:
            pass

    def close(self) -> None:
        for conn in list(self.conns):
            self._close(conn)
        self.selector.close()
        self.listener.close()


def exit_status(exits: dict[int, tuple[int, int, str]]) -> int:
    """srun's exit code: the largest of its tasks' (128 + the signal for a task a signal ended)."""
    codes = [128 + sig if sig else code for code, sig, _node in exits.values()]
    return max(codes, default=0)


def report_failures(exits: dict[int, tuple[int, int, str]]) -> None:
    for task in sorted(exits):
        code, sig, node = exits[task]
        if sig:
            print(f"{PROGRAM}: error: {node}: task {task}: killed by signal {sig}", file=sys.stderr)
        elif code:
            print(f"{PROGRAM}: error: {node}: task {task}: Exited with exit code {code}", file=sys.stderr)


class Interrupts:
    """Ctrl-C: the first sends SIGINT to the tasks, a second within INTERRUPT_WINDOW_SECS cancels the step."""

    def __init__(self) -> None:
        self.pending: list[int] = []
        self.last = 0.0

    def handler(self, _signum, _frame) -> None:
        import signal
        import time

        now = time.monotonic()
        if self.last and now - self.last <= INTERRUPT_WINDOW_SECS:
            self.pending.append(0)
        else:
            self.pending.append(signal.SIGINT)
        self.last = now

    def forward(self, signum, _frame) -> None:
        """SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGALRM: passed on to every task, as Slurm's
        srun does (sbatch --signal=USR2@90 without B: reaches the step's tasks this way)."""
        self.pending.append(signum)


FORWARDED = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT", "SIGALRM")


def run_step(client, job_id: int, values, command: list[str], environ: dict[str, str]) -> int:
    """Create a step in job_id, stream its I/O until every task has reported; srun's exit code."""
    import secrets
    import signal
    import time

    from spur_hpc.wire.grpcwire import RpcError

    listener, address = listen_address(client.addresses)
    token = secrets.token_hex(16)
    io = StepIO(listener, token, bool(values.get("label")))
    request = {
        "job_id": job_id,
        "tasks": _count(values, "ntasks"),
        "nodes": _count(values, "nodes"),
        "cpus_per_task": _count(values, "cpus_per_task"),
        "ntasks_per_node": _count(values, "ntasks_per_node"),
        "argv": command,
        "environment": _environment(values, environ),
        "work_dir": os.path.abspath(values.get("chdir") or os.getcwd()),
        "io_address": address,
        "io_token": token,
        "name": values.get("job_name") or "",
        "stdout_path": values.get("output") or "",
        "stderr_path": values.get("error") or "",
        "kill_on_bad_exit": str(values.get("kill_on_bad_exit") or "0") not in ("0", "False", ""),
        "nodelist": values.get("nodelist") or "",
        "cpu_bind": values.get("cpu_bind") or "",
    }
    interrupts = Interrupts()
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, interrupts.handler)}
    for name in FORWARDED:
        number = getattr(signal, name)
        previous[number] = signal.signal(number, interrupts.forward)
    try:
        try:
            reply = client.call("CreateStep", request, write=True)
        except RpcError as exc:
            raise CliError(f"Unable to create step for job {job_id}: {exc.details}") from None
        step = reply.step
        step_id, tasks = step.step_id, step.tasks
        io.set_tasks(tasks)
        if values.get("verbose"):
            print(f"{PROGRAM}: launching step {job_id}.{step_id} on {','.join(step.nodes)}", file=sys.stderr)
        unreachable = False
        kill_on_bad_exit, killed_at = request["kill_on_bad_exit"], -STATUS_POLL_SECS
        next_poll = time.monotonic() + STATUS_POLL_SECS
        ended_state = ""
        while len(io.exits) < tasks:
            while interrupts.pending:
                sig = interrupts.pending.pop(0)
                if sig == signal.SIGINT:
                    print(f"{PROGRAM}: interrupt (one more within 1 sec to abort)", file=sys.stderr)
                elif not sig:
                    print(f"{PROGRAM}: forcing job termination", file=sys.stderr)
                unreachable = _control(client, job_id, step_id, sig, unreachable)
            io.poll(0.2)
            bad = kill_on_bad_exit and any(c or sig for c, sig, _n in io.exits.values())
            if bad and time.monotonic() - killed_at > STATUS_POLL_SECS:
                # -K: a task that failed ends the whole step on every node; sent again while tasks remain, for a
                # node whose part had not started yet when the first went out
                killed_at = time.monotonic()
                unreachable = _control(client, job_id, step_id, signal.SIGKILL, unreachable)
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + STATUS_POLL_SECS
                state, unreachable = _step_state(client, job_id, step_id, unreachable)
                if state and state != "RUNNING":
                    if ended_state and not io.conns:
                        break  # ended twice in a row with nobody streaming: a node that never started its part
                    ended_state = state
        code = exit_status(io.exits)
        report_failures(io.exits)
        if len(io.exits) < tasks:
            code = max(code, 1)
            print(
                f"{PROGRAM}: error: step {job_id}.{step_id} ended {ended_state} without a status from "
                f"{tasks - len(io.exits)} task(s)",
                file=sys.stderr,
            )
        return code
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        io.close()


def _control(client, job_id: int, step_id: str, sig: int, unreachable: bool) -> bool:
    from spur_hpc.wire.grpcwire import RpcError

    try:
        client.call("CancelJob", {"job_id": job_id, "step_id": step_id, "signal": sig}, write=True)
        return False
    except RpcError as exc:
        if not unreachable:
            print(f"{PROGRAM}: warning: cannot signal step {job_id}.{step_id}: {exc.details}", file=sys.stderr)
        return True


def _step_state(client, job_id: int, step_id: str, unreachable: bool) -> tuple[str, bool]:
    """The step's state as the controllers record it ("" when none answers: said once, then srun streams on)."""
    from spur_hpc.wire import failover
    from spur_hpc.wire.grpcwire import RpcError

    try:
        job = client.call("GetJob", {"job_id": job_id})
    except RpcError as exc:
        if exc.code not in failover.RETRY_CODES:
            return "", unreachable  # a passing refusal: asked again at the next poll
        if not unreachable:
            print(
                f"{PROGRAM}: warning: no controller answers ({exc.details}); the step keeps running and its output "
                "keeps streaming",
                file=sys.stderr,
            )
        return "", True
    if unreachable:
        print(f"{PROGRAM}: a controller answers again", file=sys.stderr)
    for step in job.steps:
        if step.step_id == step_id:
            return _state_name(step.state), False
    return "", False


def _state_name(value: Any) -> str:
    if isinstance(value, str):
        return value
    from spur_hpc.model import JOB_STATES

    names = ("JOB_STATE_UNKNOWN", *JOB_STATES)
    return names[value] if 0 <= value < len(names) else str(value)


def _count(values, dest: str) -> int:
    text = values.get(dest)
    if text is None or text is True:
        return 0
    from spur_hpc.cli.jobopts import positive_or_range

    return positive_or_range(str(text), f"--{dest.replace('_', '-')}")


def _environment(values, environ: dict[str, str]) -> dict[str, str]:
    from spur_hpc import joblimits
    from spur_hpc.cli.sbatch import environment_to_export

    env = environment_to_export(values.get("export"), environ)
    problem = joblimits.environment_problem(env)
    if problem:
        raise CliError(f"{problem}; pass less with --export (like --export=NONE,PATH,HOME)")
    return env


def main(argv: list[str], program: str = PROGRAM) -> int:
    from spur_hpc.cli import commandline
    from spur_hpc.cli.controller import ControllerClient
    from spur_hpc.cli.jobopts import options_for, parse_job_options

    environ = dict(os.environ)
    parsed, command = parse_job_options(program, argv, environ)
    values = parsed.values
    if commandline.answer_info_flags(program, values, SYNOPSIS, "Run a job step.", options_for(program)):
        return 0
    if not command:
        raise CliError(f"no command given: srun runs a program, like '{program} -n 4 hostname'")
    parsed.print_warnings()
    client = ControllerClient()
    job_text = values.get("jobid")
    if job_text:
        job_id = _job_id(str(job_text))
        if parsed.sources.get("job_name") == "SLURM_JOB_NAME":
            # As in Slurm: inside an allocation the batch job's name is not each step's name.
            values["job_name"] = None
        return run_step(client, job_id, values, command, environ)
    from spur_hpc.cli import salloc

    job_id = salloc.allocate(client, parsed, command, environ, program)
    code = 1
    try:
        env = dict(environ, SLURM_JOB_ID=str(job_id), SLURM_JOBID=str(job_id))
        code = run_step(client, job_id, values, command, env)
    finally:
        salloc.release(client, job_id, code, program)
    return code


def _job_id(text: str) -> int:
    from spur_hpc.model import is_number

    if not is_number(text) or int(text) <= 0:
        raise CliError(f"--jobid / SLURM_JOB_ID {text!r} is not a job id; give the number of a running job")
    return int(text)
