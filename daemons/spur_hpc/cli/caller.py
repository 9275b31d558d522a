"""Who runs the command: user name, ids, host. Submissions and administrative actions carry them."""

from __future__ import annotations

import os


def user_name() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return os.environ.get("USER") or str(os.getuid())


def host_name() -> str:
    return os.uname().nodename.split(".")[0]
