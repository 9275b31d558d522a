"""Bounds of a job spec: the controller enforces them (it never trusts a client), sbatch checks them first
for a friendlier message. Stdlib only and tiny, so the CLI can import it without the controller."""

from __future__ import annotations

MAX_SCRIPT_BYTES = 4 * 1024 * 1024
MAX_FIELD_CHARS = 4096
MAX_ENV_ENTRIES = 4096
# Linux refuses to exec a process with one NAME=value string over MAX_ARG_STRLEN (32 pages): a job with a
# bigger variable could not even start its script
MAX_ENV_ENTRY_BYTES = 128 * 1024
# the kernel's own limit for arguments plus environment is 2 MB by default (a quarter of an 8 MB stack)
MAX_ENV_BYTES = 1024 * 1024
# fields that are printed as one cell of a listing: a newline there would forge a row
ONE_LINE_FIELDS = ("name", "user", "partition", "account")


def env_entry_bytes(key: str, value: str) -> int:
    """What one variable costs in the job's environment block: NAME=value and its NUL."""
    return len(key.encode("utf-8", "surrogatepass")) + len(value.encode("utf-8", "surrogatepass")) + 2


def control_character(text: str) -> str | None:
    """The first control character in text, escaped (like '\\n'), or None when there is none."""
    for char in text:
        if char < " " or "\x7f" <= char <= "\x9f" or char in "\u2028\u2029":
            return repr(char)[1:-1]
    return None


def environment_problem(env: dict[str, str]) -> str | None:
    """One line saying why this environment cannot be passed to a job, or None when it can."""
    if len(env) > MAX_ENV_ENTRIES:
        return f"the job passes {len(env)} environment variables; the limit is {MAX_ENV_ENTRIES}"
    total = 0
    for key, value in env.items():
        size = env_entry_bytes(key, value)
        if size > MAX_ENV_ENTRY_BYTES:
            return (
                f"environment variable {key[:64]!r} is {size} bytes; the limit is {MAX_ENV_ENTRY_BYTES} bytes per "
                "variable (NAME=value)"
            )
        total += size
    if total > MAX_ENV_BYTES:
        return f"the job's environment is {total} bytes; the limit is {MAX_ENV_BYTES} bytes in all"
    return None
