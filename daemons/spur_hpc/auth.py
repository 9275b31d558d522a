"""Who is asking: a credential on every request, established the way Slurm does it (MUNGE).

Clients put a credential in the gRPC metadata key `spur-auth`:
- "munge:<credential>" from the local munged (libmunge through ctypes; munged vouches for the uid/gid
  of the process that asked it, so the credential cannot be forged without the cluster's munge key);
- "none:<uid>:<gid>", a bare claim, only for [auth] type = "none" (the local demo): the server believes it.

This module stays light (no grpc, no protobuf) because the CLI imports it on every call.
"""

from __future__ import annotations

import _thread  # threading's Lock without threading's import (functools, collections): every command loads this
import os

METADATA_KEY = "spur-auth"
DEFAULT_MUNGE_SOCKET = "/run/munge/munge.socket.2"
_MUNGE_OPT_SOCKET = 8  # munge.h: MUNGE_OPT_SOCKET


class AuthError(Exception):
    """A request without a valid credential (one line, safe to send back to the caller)."""


class Identity:
    __slots__ = ("uid", "gid", "user", "verified")

    def __init__(self, uid: int, gid: int, user: str, verified: bool) -> None:
        self.uid, self.gid, self.user, self.verified = uid, gid, user, verified

    def __repr__(self) -> str:
        return f"{self.user}({self.uid})"


def user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def munge_socket() -> str:
    return os.environ.get("SPUR_MUNGE_SOCKET") or DEFAULT_MUNGE_SOCKET


class Munge:
    """libmunge through ctypes: encode (clients) and decode (daemons), about 0.1 ms each via munged."""

    _lock = _thread.allocate_lock()
    _lib = None

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path.encode()
        self.lib = self._load()

    @classmethod
    def _load(cls):
        import ctypes

        with cls._lock:
            if cls._lib is None:
                try:
                    lib = ctypes.CDLL("libmunge.so.2")
                except OSError:
                    raise AuthError(
                        "libmunge.so.2 is not installed; install the munge package (Debian: munge)"
                    ) from None
                lib.munge_ctx_create.restype = ctypes.c_void_p
                lib.munge_ctx_destroy.argtypes = [ctypes.c_void_p]
                lib.munge_ctx_strerror.restype = ctypes.c_char_p
                lib.munge_ctx_strerror.argtypes = [ctypes.c_void_p]
                lib.munge_encode.argtypes = [
                    ctypes.POINTER(ctypes.c_char_p),
                    ctypes.c_void_p,
                    ctypes.c_void_p,
                    ctypes.c_int,
                ]
                lib.munge_decode.argtypes = [
                    ctypes.c_char_p,
                    ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_void_p),
                    ctypes.POINTER(ctypes.c_int),
                    ctypes.POINTER(ctypes.c_uint32),
                    ctypes.POINTER(ctypes.c_uint32),
                ]
                cls._lib = lib
            return cls._lib

    def _context(self):
        import ctypes

        ctx = self.lib.munge_ctx_create()
        if not ctx:
            raise AuthError("munge: cannot create a context (out of memory)")
        self.lib.munge_ctx_set(ctypes.c_void_p(ctx), ctypes.c_int(_MUNGE_OPT_SOCKET), ctypes.c_char_p(self.socket_path))
        return ctx

    def _error(self, ctx, code: int, what: str) -> AuthError:
        detail = self.lib.munge_ctx_strerror(ctx)
        text = detail.decode(errors="replace") if detail else f"error {code}"
        return AuthError(f"munge {what} failed: {text} (socket {self.socket_path.decode()})")

    def encode(self) -> str:
        import ctypes

        ctx = self._context()
        try:
            cred = ctypes.c_char_p()
            code = self.lib.munge_encode(ctypes.byref(cred), ctx, None, 0)
            if code != 0:
                raise self._error(ctx, code, "encode")
            value = cred.value.decode()
            libc = ctypes.CDLL(None)
            libc.free(cred)
            return value
        finally:
            self.lib.munge_ctx_destroy(ctx)

    def decode(self, credential: str) -> tuple[int, int]:
        import ctypes

        ctx = self._context()
        try:
            payload, length = ctypes.c_void_p(), ctypes.c_int()
            uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
            code = self.lib.munge_decode(
                credential.encode(),
                ctx,
                ctypes.byref(payload),
                ctypes.byref(length),
                ctypes.byref(uid),
                ctypes.byref(gid),
            )
            if payload.value is not None:  # what munged handed back is ours to free
                ctypes.CDLL(None).free(payload)
            if code != 0:
                raise self._error(ctx, code, "credential check")
            return uid.value, gid.value
        finally:
            self.lib.munge_ctx_destroy(ctx)


def client_credential(auth_type: str | None = None, socket_path: str | None = None) -> str:
    """The credential a client sends. auth_type None: munge when munged answers, else a bare claim."""
    if auth_type != "none":
        path = socket_path or munge_socket()
        if auth_type == "munge" or os.path.exists(path):
            try:
                return "munge:" + Munge(path).encode()
            except AuthError:
                if auth_type == "munge":
                    raise
    return f"none:{os.getuid()}:{os.getgid()}"


def client_metadata(auth_type: str | None = None, socket_path: str | None = None) -> tuple[tuple[str, str], ...]:
    return ((METADATA_KEY, client_credential(auth_type, socket_path)),)


class Verifier:
    """Server side: credential -> Identity, by the daemon's [auth] settings."""

    def __init__(self, auth_type: str, socket_path: str) -> None:
        self.auth_type = auth_type
        self.socket_path = socket_path or DEFAULT_MUNGE_SOCKET
        self.munge = Munge(self.socket_path) if auth_type == "munge" else None

    def identify(self, credential: str | None) -> Identity:
        if self.auth_type == "none":
            # Insecure by design (local demo): believe the claim; no claim at all counts as root.
            if credential and credential.startswith("none:"):
                try:
                    _kind, uid, gid = credential.split(":")
                    return Identity(int(uid), int(gid), user_name(int(uid)), verified=False)
                except ValueError:
                    raise AuthError("malformed spur-auth claim; expected none:<uid>:<gid>") from None
            if credential and credential.startswith("munge:"):
                try:
                    uid, gid = Munge(self.socket_path).decode(credential[len("munge:") :])
                    return Identity(uid, gid, user_name(uid), verified=True)
                except AuthError:
                    pass
            return Identity(0, 0, "root", verified=False)
        if not credential:
            raise AuthError(
                "this cluster requires a MUNGE credential ([auth] type = munge) and the request had "
                "none; is munged running on the client host?"
            )
        if not credential.startswith("munge:"):
            raise AuthError("this cluster requires a MUNGE credential; the request carried a bare claim")
        uid, gid = self.munge.decode(credential[len("munge:") :])
        return Identity(uid, gid, user_name(uid), verified=True)


def is_admin(identity: Identity, admins: tuple[str, ...] | list[str]) -> bool:
    """root is always an administrator; others by user name or @group membership."""
    if identity.uid == 0 or identity.user in admins:
        return True
    groups = [a[1:] for a in admins if a.startswith("@")]
    if not groups:
        return False
    import grp

    for name in groups:
        try:
            group = grp.getgrnam(name)
        except KeyError:
            continue
        if group.gr_gid == identity.gid or identity.user in group.gr_mem:
            return True
    return False
