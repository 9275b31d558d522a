"""How every command ends: one line on stderr for any failure, a Slurm-like exit code, never a traceback."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class CliError(Exception):
    """A failure the user can act on; the message is one line that names the value and the fix."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def error_line(program: str, message: str) -> None:
    print(f"{program}: error: {message}", file=sys.stderr)


def run(program: str, command: Callable[[list[str]], int], argv: list[str] | None) -> int:
    """Call command(argv) and turn every expected failure into (one stderr line, exit code)."""
    from spur_hpc.cli.grpcwire import RpcError

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        code = command(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except CliError as exc:
        error_line(program, str(exc))
        return exc.exit_code
    except RpcError as exc:
        error_line(program, exc.details)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `squeue | head`: stop quietly, like a C tool killed by SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
