"""One Slurm command name on the clients' PATH (tests/clients/conftest.py writes a copy per command).

It records the call (argv, cwd, the job it runs in), runs Spur's command of the same name (the console
entry point pyproject.toml declares, run by the Spur venv's Python) with stdin passed through and stdout and
stderr copied through, forwards the signals a client or Slurm sends (INT, TERM, HUP, USR1, USR2, CONT), and
records the exit code with the head of stdout and stderr. The log is what a failed test prints: the command
lines Spur refused and what it answered. Standard library only: it runs before any client code.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time

# Filled in by conftest.py for each command: name, the entry point, the Spur Python, the conf, the log.
NAME = "@NAME@"
ENTRY = "@ENTRY@"  # "module:function", or "" when Spur declares no such command
SPUR_PYTHON = "@SPUR_PYTHON@"
SPUR_CONF = "@SPUR_CONF@"
CALL_LOG = "@CALL_LOG@"
KEEP = 4000  # characters of stdout and stderr kept in the log


def record(entry: dict) -> None:
    line = (json.dumps(entry) + "\n").encode()
    fd = os.open(CALL_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, line)
    finally:
        os.close(fd)


def copy_stream(source, sink, kept: list[bytes]) -> None:
    size = 0
    for chunk in iter(lambda: source.read1(65536), b""):
        sink.write(chunk)
        sink.flush()
        if size < KEEP:
            kept.append(chunk)
            size += len(chunk)


def main() -> int:
    args = sys.argv[1:]
    call_id = f"{os.getpid()}-{time.monotonic_ns()}"
    record(
        {
            "id": call_id,
            "event": "start",
            "argv": [NAME, *args],
            "cwd": os.getcwd(),
            "job": os.environ.get("SLURM_JOB_ID", ""),
            "time": time.time(),
        }
    )
    if not ENTRY:
        message = f"{NAME}: Spur has no {NAME} command (pyproject.toml declares no console script of that name)\n"
        sys.stderr.write(message)
        record({"id": call_id, "event": "end", "rc": 127, "stdout": "", "stderr": message, "time": time.time()})
        return 127
    module, function = ENTRY.split(":")
    code = f"import sys; sys.argv[0] = {NAME!r}; from {module} import {function}; sys.exit({function}())"
    env = dict(os.environ, SPUR_CONF=SPUR_CONF)
    env.pop("SPUR_CONTROLLER_ADDR", None)
    child = subprocess.Popen([SPUR_PYTHON, "-c", code, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCONT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    out: list[bytes] = []
    err: list[bytes] = []
    threads = [
        threading.Thread(target=copy_stream, args=(child.stdout, sys.stdout.buffer, out), daemon=True),
        threading.Thread(target=copy_stream, args=(child.stderr, sys.stderr.buffer, err), daemon=True),
    ]
    for thread in threads:
        thread.start()
    rc = child.wait()
    for thread in threads:
        thread.join(10)  # a process the command left behind may hold the pipes open
    if rc < 0:
        rc = 128 - rc  # killed by a signal: the shell's convention
    record(
        {
            "id": call_id,
            "event": "end",
            "rc": rc,
            "stdout": b"".join(out).decode(errors="replace")[:KEEP],
            "stderr": b"".join(err).decode(errors="replace")[:KEEP],
            "time": time.time(),
        }
    )
    return rc


if __name__ == "__main__":
    sys.exit(main())
