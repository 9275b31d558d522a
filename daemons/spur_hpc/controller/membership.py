"""Controllers added and removed online (`spur admin raft add|remove|status`), run on the leader.

An add is three committed records: `learn` (the new controller receives the log without voting: the other
members give it pysyncobj's read-only role, raft.SpurRaft.follow_membership), then, once the leader's match
index for it reaches the commit index and it answers, `promote`; a learner that does not catch up within the
deadline is taken out again (`remove`) and the add says why. A removal is one record; the leader removing
itself hands leadership to the most caught-up voter first and sends the caller there (NotLeader). One change
at a time: this leader takes one, and the state refuses a record decided on another membership.

Quorum safety: a change whose resulting voter set would have fewer than a majority of members this leader
heard from within leader_fallback is refused, so removing a dead member works and removing a live one while
another is down does not.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spur_hpc.controller import errors
from spur_hpc.controller.raft import SpurRaft, UnknownOutcomeError
from spur_hpc.model import CONTROLLER_GRPC_PORT, RAFT_PORT, normalize_addr

log = logging.getLogger("spurctld.membership")

TRANSFER_WAIT_SECS = 10.0
POLL_SECS = 0.1


class Membership:
    """write(op, **fields) commits one record (ControllerService.write); ping(grpc_addr) -> a PingReply or None."""

    def __init__(
        self,
        raft: SpurRaft,
        write: Callable[..., dict[str, Any]],
        ping: Callable[[str], Any],
        catch_up_secs: float,
    ) -> None:
        self.raft = raft
        self.catch_up_secs = catch_up_secs  # [controller] catch_up_timeout_secs: an add's default deadline
        self.write = write
        self.ping = ping
        self.lock = threading.Lock()
        self.in_flight = ""  # what this leader is changing now, for RaftStatus

    def _on_tick(self, fn: Callable[[], Any]) -> Any:
        """fn on the Raft tick thread; a core that does not run it in time is UNAVAILABLE, not an internal error."""
        try:
            return self.raft.on_tick(fn)
        except UnknownOutcomeError as exc:
            raise errors.Unavailable(f"{exc}; ask again, or another controller") from None

    # ---------------------------------------------------------------- reading

    def _view(self) -> tuple[list[str], dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        return self.raft.read(
            lambda s: (list(s.members), {k: dict(v) for k, v in s.learners.items()}, dict(s.member_info))
        )

    def _grpc_of(self, info: dict[str, dict[str, Any]], addr: str) -> str:
        return (info.get(addr) or {}).get("grpc_addr", "")

    def require_leader(self, grpc_of_leader: Callable[[], str | None]) -> None:
        if not self.raft.is_leader():
            leader = grpc_of_leader()
            raise errors.NotLeader(f"membership changes are made by the leader (leader: {leader or 'unknown'})", leader)

    def status(self) -> dict[str, Any]:
        """Every voter and learner: role, match and applied index, lag (match and lag are the leader's view)."""
        members, learners, info = self._view()
        leader = self.raft.leader_addr() or ""
        me = self.raft.self_addr
        is_leader = self.raft.is_leader()
        progress = self._on_tick(self.raft.progress) if is_leader else {}
        commit = self.raft.commit_index()
        addrs = members + sorted(learners)
        grpcs = {a: self._grpc_of(info, a) or learners.get(a, {}).get("grpc_addr", "") for a in addrs}
        with ThreadPoolExecutor(max_workers=max(1, len(addrs))) as pool:
            pings = dict(zip(addrs, pool.map(lambda a: self.ping(grpcs[a]) if grpcs[a] else None, addrs), strict=True))
        rows = []
        for addr in addrs:
            reply = pings.get(addr)
            voter = addr in members
            if addr == me:
                match = self.raft.last_log_index() if is_leader else 0
            else:
                match = progress.get(addr, {}).get("match", 0)
            role = reply.role if reply is not None else "unreachable"
            if not voter and reply is not None:
                role = "learner"
            rows.append(
                {
                    "raft_addr": addr,
                    "grpc_addr": grpcs[addr],
                    "role": role,
                    "voter": voter,
                    "match_index": match,
                    "applied_index": reply.applied_index if reply is not None else 0,
                    "lag": max(0, commit - match) if is_leader else 0,
                    "version": (info.get(addr) or {}).get("version") or (reply.version if reply else ""),
                    "build": (info.get(addr) or {}).get("build") or (reply.build if reply else ""),
                }
            )
        flight = self.in_flight or (f"add {next(iter(learners))}" if learners else "")
        return {
            "members": rows,
            "term": self.raft.term(),
            "commit_index": commit,
            "leader": leader,
            "change_in_flight": flight,
        }

    # ---------------------------------------------------------------- changing

    def change(self, action: str, raft_addr: str, grpc_addr: str, timeout: float) -> tuple[list[str], str]:
        if action not in ("add", "remove"):
            raise errors.InvalidArgument(f"unknown membership action {action!r}: use add or remove")
        if not raft_addr.strip():
            raise errors.InvalidArgument(f"{action} needs the controller's raft address (host:port)")
        try:
            addr = normalize_addr(raft_addr.strip(), RAFT_PORT)
            grpc = normalize_addr(grpc_addr.strip(), CONTROLLER_GRPC_PORT) if grpc_addr.strip() else ""
        except ValueError as exc:
            raise errors.InvalidArgument(f"{raft_addr!r}: {exc}") from None
        if not self.lock.acquire(blocking=False):
            raise errors.Conflict(f"a membership change is in flight ({self.in_flight}); wait for it to end")
        try:
            self.in_flight = f"{action} {addr}"
            if action == "add":
                return self._add(addr, grpc, timeout if timeout > 0 else self.catch_up_secs)
            return self._remove(addr)
        finally:
            self.in_flight = ""
            self.lock.release()

    def _commit(self, action: str, addr: str, **fields: Any) -> dict[str, Any]:
        members, _learners, _info = self._view()
        result = self.write("member_change", action=action, raft_addr=addr, expect=members, **fields)
        log.info("membership: %s %s committed; voters now %s", action, addr, ", ".join(result.get("members", [])))
        return result

    def _reachable_majority(self, voters: list[str], joining: str = "") -> tuple[int, int, list[str]]:
        """(reachable, needed, unreachable) for the voter set `voters` as this leader sees it now."""
        progress = self._on_tick(self.raft.progress)
        me = self.raft.self_addr
        # Connected and answering: a stopped process closes its connection at once, before leader_fallback ends.
        reachable = [v for v in voters if v == me or (progress.get(v, {}).get("heard") and progress[v]["connected"])]
        return len(reachable), len(voters) // 2 + 1, [v for v in voters if v not in reachable]

    def _add(self, addr: str, grpc: str, timeout: float) -> tuple[list[str], str]:
        members, learners, _info = self._view()
        if addr in members:
            return members, f"{addr} is a member already"
        if learners and addr not in learners:
            raise errors.Conflict(
                f"a change is in flight: {next(iter(learners))} is joining; wait for it, or remove it"
            )
        if addr not in learners:
            if not grpc:
                raise errors.InvalidArgument(f"add {addr} needs --grpc ADDR: where the new controller serves gRPC")
            self._commit("learn", addr, grpc_addr=grpc)
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        seen = False  # it connected at some point (it may have stopped since)
        # Caught up: it holds what was committed one poll ago. Under a steady stream of writes the commit index moves
        # every tick, and the learner's match index trails it by that tick: "equal to the commit index now" might
        # never hold, "at least the commit index of POLL_SECS ago" does once it keeps pace.
        target = None
        while True:
            progress = self._on_tick(self.raft.progress).get(addr, {})
            seen = seen or bool(progress.get("connected"))
            commit = self.raft.commit_index()
            live = progress.get("heard") and progress.get("connected")
            if live and target is not None and progress.get("match", 0) >= target:
                break
            target = commit
            if time.monotonic() > deadline or not self.raft.is_leader():
                return self._not_promoted(addr, progress, commit, timeout, seen)
            time.sleep(POLL_SECS)
        members, _learners, _info = self._view()
        reachable, needed, down = self._reachable_majority([*members, addr])
        if reachable < needed:
            self._commit("remove", addr)
            raise errors.Conflict(
                f"{addr} was not promoted: with it, {reachable} of {len(members) + 1} voters would be reachable, "
                f"fewer than the {needed} a majority needs ({', '.join(down)} do not answer); start them first"
            )
        result = self._commit("promote", addr)
        took = time.monotonic() - started
        return result["members"], f"{addr} caught up in {took:.1f} s and is a voting member"

    def _not_promoted(
        self, addr: str, progress: dict[str, Any], commit: int, timeout: float, seen: bool
    ) -> tuple[list[str], str]:
        if not self.raft.is_leader():
            raise errors.Unavailable(f"this controller lost the leadership while {addr} was catching up; ask again")
        if seen and not progress.get("connected"):
            why = f"it stopped answering, holding {progress.get('match', 0)} of the {commit} committed entries"
        elif not progress.get("connected"):
            why = (
                "it never connected: start spurctld there with an empty state_dir, this cluster's "
                "raft_secret_file and a [controller] hosts list that names a member"
            )
        else:
            why = f"it holds {progress.get('match', 0)} of the {commit} committed entries"
        self._commit("remove", addr)
        raise errors.Conflict(
            f"{addr} was not promoted: it did not catch up within {timeout:g} s ({why}); it was taken out again"
        )

    def _remove(self, addr: str) -> tuple[list[str], str]:
        members, learners, info = self._view()
        if addr in learners:
            result = self._commit("remove", addr)
            return result["members"], f"{addr} was joining; it is taken out and was never promoted"
        if addr not in members:
            raise errors.NotFound(f"{addr} is not a member (members: {', '.join(members)})")
        if len(members) == 1:
            raise errors.Conflict(f"{addr} is the last controller; a cluster cannot remove its last member")
        me = self.raft.self_addr
        if addr == me:
            self._hand_over()
        remaining = [m for m in members if m != addr]
        reachable, needed, down = self._reachable_majority(remaining)
        if reachable < needed:
            raise errors.Conflict(
                f"removing {addr} would leave {reachable} of {len(remaining)} voters reachable, fewer than the "
                f"{needed} a majority needs ({', '.join(down)} do not answer); start them, or remove them first"
            )
        result = self._commit("remove", addr)
        return result["members"], f"{addr} is no longer a member"

    def _hand_over(self) -> None:
        """The leader removes itself: another voter leads first, and the caller retries there (NotLeader)."""
        deadline = time.monotonic() + TRANSFER_WAIT_SECS
        while time.monotonic() < deadline:
            if self.raft.is_leader():
                self._on_tick(self.raft.transfer_leadership)
            time.sleep(0.2)
            leader = self.raft.leader_addr()
            if leader and leader != self.raft.self_addr:
                _members, _learners, info = self._view()
                grpc = self._grpc_of(info, leader)
                raise errors.NotLeader(f"leadership moved to {grpc or leader} so that it removes this controller", grpc)
        raise errors.Conflict(
            f"the leader could not hand over leadership within {TRANSFER_WAIT_SECS:g} s (no other voter is caught "
            "up and connected); ask again when `spur admin raft status` shows a voter with lag 0"
        )
