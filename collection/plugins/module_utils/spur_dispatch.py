# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Hold new dispatch to a node whose spurd is about to restart in place: observe the node and the WAL level,
keep a hold that still runs long enough, else ask the leader for one (HoldDispatch, WAL level 4)."""

from __future__ import annotations

import time

from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurConnection
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurInvalid, SpurNotFound, SpurRefused

HOLD_WAL_LEVEL = 4  # the level of the controllers' node_dispatch_hold record


class DispatchHold:
    """spur_dispatch_hold: the node takes no new job or step until its agent registers again or the hold ends."""

    def __init__(self, params: dict, check_mode: bool = False, diff: bool = False, clock=time.time) -> None:
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        self.clock = clock  # the controllers' wall clock is what dispatch_hold_until counts in
        if params["hold_secs"] < 0:
            raise SpurInvalid("hold_secs must not be negative, not %s" % params["hold_secs"], override="hold_secs")
        self.connection = SpurConnection(params)

    @property
    def name(self) -> str:
        return self.params["name"]

    def run(self) -> dict:
        try:
            return self._run()
        finally:
            self.connection.close()

    def _run(self) -> dict:
        try:
            before = self.connection.get_node(self.name)
        except SpurNotFound:
            raise SpurNotFound("node %s does not exist on the controllers" % self.name) from None
        level = self.connection.wal_level()
        result = dict(name=self.name, wal_level=level, node=before)
        if level < HOLD_WAL_LEVEL:
            why = ("the cluster runs WAL level %d and a dispatch hold needs level %d (every controller on a release "
                   "that reads it, then the level raised)" % (level, HOLD_WAL_LEVEL))
            if self.params["on_unsupported"] == "fail":
                raise SpurRefused(why + "; restart this agent in a batch of one instead", override="on_unsupported")
            return dict(result, changed=False, held=False, hold_until=0.0, msg=why + "; no hold set",
                        warnings=[why + "; node %s restarts without one" % self.name])
        now = self.clock()
        left = before["dispatch_hold_until"] - now
        wanted = self.params["hold_secs"]
        # A hold with at least half the asked time left is kept (a re-run does not re-arm it); 0 asks the longest.
        if left > 0 and (not wanted or left >= wanted / 2.0):
            after, changed, until = before, False, before["dispatch_hold_until"]
        elif self.check_mode:  # the controller caps the hold at its heartbeat_timeout_secs; 0: unknown here
            after, changed, until = before, True, now + wanted if wanted else 0.0
        else:
            after = self.connection.hold_dispatch(self.name, wanted)
            changed, until = True, after["dispatch_hold_until"]
        result.update(changed=changed, node=after, held=True, hold_until=until)
        if self.diff:
            result["diff"] = dict(before=dict(dispatch_hold_until=before["dispatch_hold_until"]),
                                  after=dict(dispatch_hold_until=until))
        return result
