"""A follower whose tick thread stalls longer than the election timeout does not depose a healthy leader.

pysyncobj judges a follower's election deadline at the start of a tick, right after the journal's
once-a-second sync, and reads its sockets at the end of the tick. When that sync takes longer than the
election timeout (an fsync on a busy disk; a loaded host that does not schedule the thread), the leader's
appends are waiting unread in the socket while the deadline says they never came, and the follower stood for
election: on a loaded machine a 50,000-entry fill saw 56 elections. The follower reads what waits before it
stands (controller/raft.py). The test stalls one follower's sync (the harness's STALLED_SYNC hook) and checks
that the term stays put (one election of the loaded machine's own is forgiven) while the follower keeps
applying.
"""

from __future__ import annotations

import time

import pytest

from harness import spawn_stalled_sync, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow

STALL_SECS = 1.2  # longer than election_timeout_max_ms (800)
WATCH_SECS = 8.0  # about three stalls


def test_a_follower_whose_tick_stalls_does_not_start_elections(make_cluster):
    cluster = make_cluster(3)
    leader = cluster.wait_leader(timeout=30)
    stalled = next(m for m in cluster.members if m is not leader)
    stalled.proc.stop()
    spawn_stalled_sync(stalled, STALL_SECS)  # the same follower, its journal kept, now stalling
    stub = cluster.stub(leader)

    def submit() -> int:
        spec = slurm_pb2.JobSpec(name="x", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
        return stub.SubmitJob(slurm_pb2.SubmitJobRequest(spec=spec), timeout=10).job_id

    submit()
    def caught_up() -> bool:
        st, lt = stalled.status(), leader.status()
        return stalled.probe("/livez") == 200 and st.get("applied_index", 0) >= lt["commit_index"]

    wait_until(caught_up, 30, "the stalled follower to catch up")
    term = leader.status()["term"]
    until = time.monotonic() + WATCH_SECS
    while time.monotonic() < until:
        submit()
        time.sleep(0.2)
    # Each stall deposed the leader before (term 3 -> 7 over the watch); one election of the machine's own (a
    # loaded CI host) is forgiven.
    terms = {m.index: m.status()["term"] for m in cluster.members}
    assert max(terms.values()) - term <= 1, f"the leader's term was {term}; now {terms}\n{cluster.logs()}"
    target = leader.status()["commit_index"]
    wait_until(lambda: stalled.status().get("applied_index", 0) >= target, 30, "the stalled follower to apply")
