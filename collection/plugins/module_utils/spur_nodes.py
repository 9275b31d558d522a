# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drain, resume and down one node: observe, compare, act; undo only what this run did when a wait fails."""

from __future__ import annotations

import socket
import time

from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurConnection
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import (
    SpurInvalid,
    SpurNotFound,
    SpurRefused,
    SpurTimeout,
    SpurUnreachable,
)
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import IN_SERVICE_STATES

POLL_SECS = 0.5
# A wait outlives a short loss of the controllers (a network blip, an election); longer than this, it fails.
UNREACHABLE_GRACE_SECS = 30.0


def admin_down(node: dict) -> bool:
    """DOWN set by an administrator. A lost agent makes a node DOWN too, with the controller as the setter."""
    return node["state"] == "DOWN" and (node["registered"] or node["reason_set_by"] != "spurctld")


def outcome_of(node: dict) -> str:
    """gone: the agent is not registered; down: set DOWN; busy: drained but jobs still run; drained: drained
    and quiet; in_service: schedulable."""
    if admin_down(node):
        return "down"
    if not node["registered"]:
        return "gone"
    if node["drain"]:
        return "busy" if node["job_ids"] else "drained"
    return "in_service"


def summary(node: dict | None) -> dict:
    if node is None:
        return {}
    return dict(state=node["state"], reason=node["reason"], drain=node["drain"], registered=node["registered"],
                job_ids=list(node["job_ids"]))


class NodeStateChange:
    """spur_node: bring one node to drained, resumed or down."""

    def __init__(self, params: dict, check_mode: bool = False, diff: bool = False, clock=time.monotonic,
                 sleep=time.sleep) -> None:
        self.params = params
        self.check_mode = check_mode
        self.diff = diff
        self.clock = clock
        self.sleep = sleep
        self.prefix = params["reason_prefix"]
        if not self.prefix.strip():
            raise SpurInvalid("reason_prefix must not be empty: it is how a resume tells this collection's drains "
                              "from an operator's", override="reason_prefix")
        if params["wait_timeout"] < 0:
            raise SpurInvalid("wait_timeout must not be negative, not %s" % params["wait_timeout"],
                              override="wait_timeout")
        self.connection = SpurConnection(params)
        self.warnings: list[str] = []

    @property
    def name(self) -> str:
        return self.params["name"]

    def reason(self) -> str:
        return self.prefix + (self.params["reason"] or "")

    def set_by(self) -> str:
        return "spur.cluster@%s" % socket.gethostname().split(".")[0]

    # ---------------------------------------------------------------- entry point

    def run(self) -> dict:
        try:
            try:
                before = self.poll_node()
            except SpurNotFound:
                if self.params["allow_missing"]:
                    return dict(changed=False, name=self.name, outcome="gone", drained_before=False,
                                node=None, before={}, reverted=False,
                                msg="node %s does not exist on the controllers" % self.name)
                raise SpurNotFound("node %s does not exist on the controllers" % self.name,
                                   override="allow_missing") from None
            handler = {"drained": self.drain, "resumed": self.resume, "down": self.down}[self.params["state"]]
            result = handler(before)
        finally:
            self.connection.close()
        after = result.get("node") or before
        result.setdefault("outcome", outcome_of(after))
        result.update(name=self.name, drained_before=bool(before["drain"]), before=summary(before))
        result.setdefault("reverted", False)
        if self.diff:
            result["diff"] = dict(before=summary(before), after=result.pop("predicted", None) or summary(after))
        result.pop("predicted", None)
        if self.warnings:
            result["warnings"] = self.warnings
        return result

    # ---------------------------------------------------------------- drained

    def drain(self, before: dict) -> dict:
        if before["drain"]:
            changed, node = False, before
            if not before["reason"].startswith(self.prefix) and before["state"] != "DOWN":
                self.warnings.append("node %s was already drained by %s (%r); left as it is" % (
                    self.name, before["reason_set_by"] or "someone else", before["reason"]))
        elif self.check_mode:
            predicted = dict(summary(before), drain=True, reason=self.reason(),
                             state="DRAINING" if before["job_ids"] else "DRAINED")
            return dict(changed=True, node=before, outcome="drained" if not before["job_ids"] else "busy",
                        predicted=predicted)
        else:
            changed = True
            node = self.through_outage(self.connection.drain_node, self.name, self.reason(), self.set_by())
        if self.params["wait"] and not self.check_mode:
            return self.wait_quiet(node, changed)
        return dict(changed=changed, node=node)

    def wait_quiet(self, node: dict, drained_now: bool) -> dict:
        deadline = self.clock() + self.params["wait_timeout"]
        while node["job_ids"] and node["registered"]:
            if self.clock() >= deadline:
                return self.busy_after_wait(node, drained_now)
            self.sleep(POLL_SECS)
            node = self.poll_node()
        return dict(changed=drained_now, node=node)

    def poll_node(self) -> dict:
        """The node as the controllers see it now."""
        return self.through_outage(self.connection.get_node, self.name)

    def through_outage(self, call, *args, **kwargs) -> dict:
        """call(*args) again while no controller answers, for up to UNREACHABLE_GRACE_SECS: a network drop in the
        middle of a drain must not fail a rolling upgrade. Drain, resume and down are safe to repeat."""
        since = None
        while True:
            try:
                return call(*args, **kwargs)
            except SpurUnreachable as exc:
                self.connection.forget()  # probe again: the outage may have hidden every controller
                since = self.clock() if since is None else since
                if self.clock() - since >= UNREACHABLE_GRACE_SECS:
                    raise SpurUnreachable("%s; no controller answered for %.0f s while working on node %s" % (
                        exc, UNREACHABLE_GRACE_SECS, self.name)) from None
                self.sleep(POLL_SECS)

    def busy_after_wait(self, node: dict, drained_now: bool) -> dict:
        action = self.params["on_timeout"]
        jobs = ", ".join(str(j) for j in node["job_ids"])
        reverted = False
        if action in ("fail", "revert") and drained_now:
            # Undo only our own drain: the prefix check makes the controller refuse if someone re-drained it.
            node = self.through_outage(self.connection.resume_node, self.name, only_if_reason_prefix=self.prefix)
            reverted = True
        result = dict(changed=drained_now and not reverted, node=node, outcome="busy", reverted=reverted)
        if action == "fail":
            raise SpurTimeout(
                "node %s still runs jobs %s after %.0f s of draining%s" % (
                    self.name, jobs, self.params["wait_timeout"], "; its drain was undone" if reverted else ""),
                override="wait_timeout", details=dict(result, name=self.name, before=summary(node)))
        self.warnings.append("node %s still runs jobs %s after %.0f s; %s" % (
            self.name, jobs, self.params["wait_timeout"],
            "its drain was undone" if reverted else "it keeps draining"))
        return result

    # ---------------------------------------------------------------- resumed

    def resume(self, before: dict) -> dict:
        force = self.params["force"]
        ours = before["reason"].startswith(self.prefix)
        if not before["drain"] and not admin_down(before):
            return self.wait_in_service(dict(changed=False, node=before))
        # The reason shown is the DOWN reason when the node is down; the controller checks the drain's own
        # reason when we pass the prefix, so ownership is decided there, not guessed here.
        if before["drain"] and not force:
            if self.check_mode:
                if before["state"] != "DOWN" and not ours:
                    self.foreign(before)
                    return dict(changed=False, node=before)
                return dict(changed=True, node=before, predicted=self.predicted_resume(before))
            try:
                node = self.through_outage(self.connection.resume_node, self.name, only_if_reason_prefix=self.prefix)
            except SpurRefused:
                self.foreign(before)
                return dict(changed=False, node=before)
            return self.wait_in_service(dict(changed=True, node=node))
        if not before["drain"] and not ours and not force:  # an operator's DOWN
            self.foreign(before)
            return dict(changed=False, node=before)
        if self.check_mode:
            return dict(changed=True, node=before, predicted=self.predicted_resume(before))
        node = self.through_outage(self.connection.resume_node, self.name)
        return self.wait_in_service(dict(changed=True, node=node))

    def predicted_resume(self, before: dict) -> dict:
        state = "IDLE" if before["registered"] else "DOWN"
        return dict(summary(before), drain=False, reason="" if before["registered"] else before["reason"], state=state)

    def foreign(self, node: dict) -> None:
        self.warnings.append(
            "node %s is %s by %s with reason %r, which this collection did not set; left as it is "
            "(set force to resume it anyway)" % (
                self.name, "drained" if node["drain"] else "down", node["reason_set_by"] or "someone else",
                node["reason"]))

    def wait_in_service(self, result: dict) -> dict:
        node = result["node"]
        if not self.params["wait"] or self.check_mode:
            return result
        deadline = self.clock() + self.params["wait_timeout"]
        while not (node["registered"] and node["state"] in IN_SERVICE_STATES):
            if node["drain"] or admin_down(node):
                return dict(result, node=node)  # held out of service by someone else: waiting cannot help
            if self.clock() >= deadline:
                raise SpurTimeout(
                    "node %s is %s%s after %.0f s (its agent has not registered again)" % (
                        self.name, node["state"], " (%s)" % node["reason"] if node["reason"] else "",
                        self.params["wait_timeout"]),
                    override="wait_timeout", details=dict(result, node=node, name=self.name))
            self.sleep(POLL_SECS)
            node = self.poll_node()
        return dict(result, node=node)

    # ---------------------------------------------------------------- down

    def down(self, before: dict) -> dict:
        if admin_down(before):
            return dict(changed=False, node=before)
        if before["job_ids"] and not self.params["force"]:
            raise SpurRefused(
                "node %s runs jobs %s; setting it DOWN ends them as NODE_FAIL" % (
                    self.name, ", ".join(str(j) for j in before["job_ids"])),
                override="force")
        if self.check_mode:
            predicted = dict(summary(before), state="DOWN", reason=self.reason(), job_ids=[])
            return dict(changed=True, node=before, outcome="down", predicted=predicted)
        node = self.through_outage(self.connection.down_node, self.name, self.reason(), self.set_by())
        return dict(changed=True, node=node)
