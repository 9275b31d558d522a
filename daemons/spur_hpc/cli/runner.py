"""How every command ends: one line on stderr for any failure, a Slurm-like exit code, never a traceback."""

from __future__ import annotations

import os
import sys

from spur_hpc.model import InvalidValue

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class CliError(Exception):
    """A failure the user can act on; the message is one line that names the value and the fix."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def printable(text: str) -> str:
    """text with each character that is not printable escaped as repr() writes it (a newline as \\n): a
    value from a user or from a record can never start a line of its own or move the cursor."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def error_line(program: str, message: str) -> None:
    print(f"{program}: error: {printable(message)}", file=sys.stderr)


def submit_failure(program: str, what: str, exc: Any) -> CliError:
    """A refused submission (exc: wire.grpcwire.RpcError) as Slurm prints it: when the controller sent Slurm's error
    text (trailing model.SLURM_ERROR_METADATA_KEY), its own line first, then `what: ` and that text; else `what: `
    and the controller's line."""
    from spur_hpc.model import SLURM_ERROR_METADATA_KEY

    slurm_error = dict(exc.trailing).get(SLURM_ERROR_METADATA_KEY)
    if not slurm_error:
        return CliError(f"{what}: {exc.details}")
    if exc.details != slurm_error:
        error_line(program, exc.details)
    return CliError(f"{what}: {slurm_error}")


def check_arguments(args: list[str]) -> None:
    """Bytes that are not UTF-8 arrive as lone surrogates; no protobuf string can carry them. (A NUL cannot come
    from a real command line, only from a caller in-process; it would break open() and the C layers.)"""
    for arg in args:
        if "\x00" in arg:
            raise CliError(f"argument '{arg}' contains a NUL character; remove it")
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise CliError(f"argument '{shown}' is not UTF-8 text; write it in UTF-8 (iconv -t UTF-8)") from None


def run(program: str, command: Callable[[list[str]], int], argv: list[str] | None) -> int:
    """Call command(argv) and turn every expected failure into (one stderr line, exit code)."""
    from spur_hpc.wire.grpcwire import RpcError
    from spur_hpc.wire.protocodec import ProtoError

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        check_arguments(args)
        code = command(args)
        sys.stdout.flush()  # a closed pipe shows up here, not at interpreter exit
        return code
    except CliError as exc:
        error_line(program, str(exc))
        return exc.exit_code
    except InvalidValue as exc:  # a notation the shared model reads (a hostlist) was malformed
        error_line(program, str(exc))
        return 1
    except RpcError as exc:
        error_line(program, exc.details)
        return 1
    except ProtoError as exc:  # a value that does not fit its field: refused here, never sent wrapped
        error_line(program, str(exc))
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `squeue | head`: stop quietly, like a C tool killed by SIGPIPE
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
