# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The errors of spur.cluster's module_utils, one class per kind of failure a task can report.

Nothing in module_utils calls fail_json. Every problem is raised as a SpurError subclass that carries one
line saying what was found and, where one exists, the module option that overrides it; a module's main()
turns it into the failure message once.
"""

from __future__ import annotations


class SpurError(Exception):
    """Base of every error the modules report: one line, plus the option that overrides it, if any."""

    def __init__(self, message: str, override: str | None = None, details: dict | None = None,
                 exception: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.override = override
        self.details = dict(details or {})
        self.exception = exception

    def fail_result(self) -> dict:
        """Keyword arguments for fail_json: the message, the overriding option and what was observed."""
        msg = self.message
        if self.override and self.override not in msg:
            msg = "%s (set %s to override)" % (msg, self.override)
        result = dict(self.details)
        result["msg"] = msg
        if self.override:
            result["override"] = self.override
        if self.exception:
            result["exception"] = self.exception
        return result


class SpurUnreachable(SpurError):
    """No daemon answered (connection refused, timeout, no leader)."""


class SpurNotFound(SpurError):
    """The controller does not know the node or job."""


class SpurInvalid(SpurError):
    """A module parameter or a request field is not valid."""


class SpurRefused(SpurError):
    """The observed state refuses the request (a guard rail, a drain we do not own, a lower WAL level)."""


class SpurTimeout(SpurError):
    """A wait ran out before the condition held."""
