"""The I/O stream of a job step, between each spurstepd of the step and the srun that started it.

srun listens on a TCP port of the submit host; every spurstepd of the step connects there and sends a
HELLO frame first (srun's random token, this node and its task ids: srun closes any connection whose first
frame is something else or carries another token), then the tasks' output as STDOUT/STDERR frames and one
EXIT frame per task. A frame is a 9-byte header (kind: 1 byte, task id: 4 bytes, payload length: 4 bytes,
network order) and at most MAX_PAYLOAD bytes of payload, so a reader never buffers more than one frame.

Standard library only: spurstepd and the CLI both import it (docs/architecture.md).
"""

from __future__ import annotations

import json
import struct

HEADER = struct.Struct("!BII")
MAX_PAYLOAD = 32 * 1024
MAX_TOKEN_CHARS = 128

HELLO, STDOUT, STDERR, EXIT = 1, 2, 3, 4
KINDS = {HELLO: "hello", STDOUT: "stdout", STDERR: "stderr", EXIT: "exit"}


class FrameError(Exception):
    """A stream that does not follow this framing (a stray client, a corrupt peer)."""


def frame(kind: int, task: int, payload: bytes = b"") -> bytes:
    if kind not in KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    if len(payload) > MAX_PAYLOAD:
        raise FrameError(f"a frame carries at most {MAX_PAYLOAD} bytes, not {len(payload)}")
    return HEADER.pack(kind, task, len(payload)) + payload


def output_frames(kind: int, task: int, data: bytes) -> list[bytes]:
    """data of any size as frames of at most MAX_PAYLOAD bytes each."""
    return [frame(kind, task, data[i : i + MAX_PAYLOAD]) for i in range(0, len(data), MAX_PAYLOAD)]


def hello(token: str, node: str, tasks: list[int]) -> bytes:
    return frame(HELLO, 0, json.dumps({"token": token, "node": node, "tasks": tasks}).encode())


def exit_frame(task: int, exit_code: int, signal: int) -> bytes:
    return frame(EXIT, task, json.dumps({"exit_code": exit_code, "signal": signal}).encode())


def read_json(payload: bytes, what: str) -> dict:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise FrameError(f"the {what} frame is not JSON") from None
    if not isinstance(value, dict):
        raise FrameError(f"the {what} frame is not a JSON object")
    return value


class FrameReader:
    """Cuts a byte stream into (kind, task, payload) frames; feed() as data arrives."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self._buffer += data
        frames = []
        while len(self._buffer) >= HEADER.size:
            kind, task, length = HEADER.unpack_from(self._buffer)
            if kind not in KINDS:
                raise FrameError(f"unknown frame kind {kind}")
            if length > MAX_PAYLOAD:
                raise FrameError(f"a frame of {length} bytes is over the {MAX_PAYLOAD}-byte bound")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            frames.append((kind, task, bytes(self._buffer[HEADER.size : end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


class LineLabeler:
    """srun --label: each complete line of a task's stream prefixed with "<task>: "; partial lines are kept
    (at most MAX_PAYLOAD bytes, then cut) until their newline or the task's end."""

    def __init__(self, width: int = 0) -> None:
        self.width = width
        self._partial: dict[tuple[int, int], bytes] = {}

    def prefix(self, task: int) -> bytes:
        return f"{task:>{self.width}}: ".encode()

    def feed(self, kind: int, task: int, data: bytes) -> bytes:
        key = (kind, task)
        text = self._partial.pop(key, b"") + data
        lines = text.split(b"\n")
        rest = lines.pop()
        out = b"".join(self.prefix(task) + line + b"\n" for line in lines)
        if len(rest) > MAX_PAYLOAD:
            out += self.prefix(task) + rest + b"\n"
        elif rest:
            self._partial[key] = rest
        return out

    def flush(self, kind: int, task: int) -> bytes:
        rest = self._partial.pop((kind, task), b"")
        return self.prefix(task) + rest + b"\n" if rest else b""
