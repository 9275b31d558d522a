"""Controllers added and removed online (issue 23): real spurctld processes and the real `spur admin raft` command.

1 -> 2 -> 3 while a client submits, then 3 -> 2 removing the leader; quorum refusals, removing a dead member, a
joining controller that dies before it is promoted, and an empty controller that was never added.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid

import grpc

from harness import BIN, wait_until
from spur_hpc.proto import slurm_pb2

SPUR = str(BIN / "spur")


def spur_admin(cluster, *args: str, via: list | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=",".join(m.grpc_addr for m in (via or cluster.running())))
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return subprocess.run([SPUR, "admin", "raft", *args], env=env, capture_output=True, text=True, timeout=timeout)


def start_add(cluster, m, via: list, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, SPUR_CONTROLLER_ADDR=",".join(x.grpc_addr for x in via))
    return subprocess.Popen(
        [SPUR, "admin", "raft", "add", m.raft_addr, "--grpc", m.grpc_addr, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[int, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out + err


class Submitter(threading.Thread):
    """Submits jobs one after the other through whichever controller answers; keeps every acknowledged id."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.acked: list[int] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            key = uuid.uuid4().hex
            request = slurm_pb2.SubmitJobRequest(
                spec=slurm_pb2.JobSpec(name="m", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp"),
                idempotency_key=key,
            )
            while not self.stop_event.is_set():  # the same key until one answer: a retry never duplicates
                done = False
                for m in self.cluster.running():
                    try:
                        self.acked.append(self.cluster.stub(m).SubmitJob(request, timeout=5).job_id)
                        done = True
                        break
                    except grpc.RpcError:
                        continue
                if done:
                    break
            self.stop_event.wait(0.02)

    def finish(self) -> list[int]:
        self.stop_event.set()
        self.join(30)
        return self.acked


def job_ids(cluster, m) -> list[int]:
    reply = cluster.stub(m).ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=10)
    return sorted(j.job_id for j in reply.jobs)


def views(members) -> dict[str, tuple]:
    out = {}
    for m in members:
        s = m.status()
        out[m.raft_addr] = (s["cluster_id"], tuple(sorted(s["members"])), s["next_job_id"], s["jobs"])
    return out


def same_state(cluster, members, want_members: list[str]) -> bool:
    v = views(members)
    return len(set(v.values())) == 1 and next(iter(v.values()))[1] == tuple(sorted(want_members))


def add(c, m, via: list) -> str:
    """spur admin raft add while m starts empty (its spur.conf names the whole set being built); the command's text."""
    adding = start_add(c, m, via)
    wait_until(lambda: m.raft_addr in spur_admin(c, "status", via=via).stdout, 20, f"{m.raft_addr} recorded as joining")
    c.write_conf(m)
    c.spawn(m)
    code, text = finish(adding)
    assert code == 0 and "is a voting member" in text, text
    assert "joining it as a learner" in m.proc.log_text()
    return text


def submit_one(c, m) -> int:
    spec = slurm_pb2.JobSpec(name="m", script="#!/bin/sh\ntrue\n", user="root", work_dir="/tmp")
    request = slurm_pb2.SubmitJobRequest(spec=spec, idempotency_key=uuid.uuid4().hex)
    return c.stub(m).SubmitJob(request, timeout=10).job_id


def test_one_to_three_to_five_to_three_while_submitting(make_cluster):
    c = make_cluster(5, start=False)
    a = c.members[0]
    c.write_conf(a, peers=[a.raft_addr], hosts=[a.grpc_addr])
    c.start([0])
    submitter = Submitter(c)
    submitter.start()
    wait_until(lambda: len(submitter.acked) >= 5, 20, "the first submissions")

    # One at a time, each new controller recorded as joining, started empty, caught up and promoted.
    for i in range(1, 5):
        add(c, c.members[i], c.members[:i])
    status = spur_admin(c, "status", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert status.stdout.count('"voter": true') == 5, status.stdout

    # 5 -> 3: the leader first (it hands over, the command goes on at the next leader), then a follower.
    leader = c.wait_leader()
    gone = spur_admin(c, "remove", leader.raft_addr)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert leader.proc.wait_exit(30) == 0
    assert "was removed from cluster" in leader.proc.log_text()
    new_leader = c.wait_leader(exclude=leader)
    follower = next(m for m in c.running() if m is not new_leader)
    gone = spur_admin(c, "remove", follower.raft_addr)
    assert gone.returncode == 0, gone.stdout + gone.stderr
    assert follower.proc.wait_exit(30) == 0
    rest = [m for m in c.members if m not in (leader, follower)]
    want = [m.raft_addr for m in rest]

    acked = submitter.finish()
    assert len(acked) == len(set(acked)), "an acknowledged job id was given twice"
    assert acked == sorted(acked), "job ids went backwards"
    for m in rest:
        wait_until(lambda m=m: set(acked) <= set(job_ids(c, m)), 20, f"{m.raft_addr} to hold every acknowledged job")
    wait_until(lambda: same_state(c, rest, want), 20, "every remaining member the same state")
    assert submit_one(c, c.wait_leader()) > max(acked)

    # The membership is durable: a remaining member restarted agrees, and a removed one refuses to start.
    again = next(m for m in rest if m is not c.wait_leader())
    c.restart(again.index)
    wait_until(lambda: same_state(c, rest, want), 20, "the restarted member to agree")
    c.spawn(leader)
    assert leader.proc.wait_exit(30) != 0
    assert "was removed from cluster" in leader.proc.log_text()


def test_quorum_refusals_dead_member_and_a_joiner_that_dies(make_cluster):
    c = make_cluster(4, start=False)
    a, b, d, e = c.members
    three = [a, b, d]
    for m in three:
        c.write_conf(m, peers=[x.raft_addr for x in three], hosts=[x.grpc_addr for x in three])
    c.start([0, 1, 2])
    leader = c.wait_leader()
    dead, live = [m for m in three if m is not leader]
    dead.proc.kill9()
    wait_until(lambda: "unreachable" in spur_admin(c, "status", via=[leader]).stdout, 20, "the leader to miss it")

    # Removing the live follower would leave the leader and a dead member: refused with one line.
    refused = spur_admin(c, "remove", live.raft_addr)
    assert refused.returncode != 0
    assert "fewer than" in refused.stderr and dead.raft_addr in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    # A joining controller that stops before it is promoted is not promoted; the add says why.
    adding = start_add(c, e, [leader, live], "--timeout", "3")
    c.write_conf(e, peers=[x.raft_addr for x in [*three, e]], hosts=[x.grpc_addr for x in [*three, e]])
    wait_until(lambda: e.raft_addr in spur_admin(c, "status", via=[leader, live]).stdout, 20, "e recorded as joining")
    c.spawn(e)
    e.proc.signal(signal.SIGSTOP)  # stopped before it connected: it never catches up
    code, text = finish(adding)
    assert code != 0 and "was not promoted" in text and "3 s" in text, text
    e.proc.kill9()
    # An empty controller that is not (or no longer) being added refuses to start.
    c.spawn(e)
    assert e.proc.wait_exit(30) != 0
    assert "refusing to start" in e.proc.log_text() and "spur admin raft add" in e.proc.log_text()

    # Removing the dead member works; the two live ones carry on.
    removed = spur_admin(c, "remove", dead.raft_addr)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    want = [leader.raft_addr, live.raft_addr]
    wait_until(lambda: same_state(c, [leader, live], want), 20, "the two live members to agree")
    status = spur_admin(c, "status")
    assert status.returncode == 0 and dead.raft_addr not in status.stdout, status.stdout
    # Started again once the others stopped sending it the log, the removed member hears from no leader, asks its
    # peers, learns it was removed and stops; the next start refuses at once.
    wait_until(lambda: not any(m.status()["leaving"] for m in (leader, live)), 20, "the removed member dropped")
    c.spawn(dead)
    code = dead.proc.wait_exit(40)
    assert code == 0, f"exit {code}: " + " | ".join(dead.proc.log_text().strip().splitlines()[-4:])
    assert "removed from cluster" in dead.proc.log_text() and "while it was away" in dead.proc.log_text()
    c.spawn(dead)
    assert dead.proc.wait_exit(30) != 0
    assert "refusing to start" in dead.proc.log_text().rsplit("===== start", 1)[-1]

    # The two left take a spur.conf naming the two (as remove_controllers.yml writes it) and restart: a member with
    # data runs with two peers, and the cluster serves.
    pair = [leader, live]
    for m in pair:
        c.write_conf(m, peers=[x.raft_addr for x in pair], hosts=[x.grpc_addr for x in pair])
        c.restart(m.index)
    serving = c.wait_leader(timeout=20, exclude=dead)
    assert submit_one(c, serving) > 0


def test_leader_killed_in_the_middle_of_an_add(make_cluster):
    c = make_cluster(4, start=False)
    three, e = c.members[:3], c.members[3]
    for m in three:
        c.write_conf(m, peers=[x.raft_addr for x in three], hosts=[x.grpc_addr for x in three])
    c.start([0, 1, 2])
    leader = c.wait_leader()
    # The add is recorded, then its leader dies before the new controller even starts: the command goes on at
    # the next leader, which finds the controller joining and promotes it once it caught up.
    adding = start_add(c, e, three)
    wait_until(lambda: e.raft_addr in spur_admin(c, "status", via=[leader]).stdout, 20, "e recorded as joining")
    leader.proc.kill9()
    rest = [m for m in three if m is not leader]
    c.wait_leader(exclude=leader)
    c.write_conf(e)
    c.spawn(e)
    code, text = finish(adding)
    assert code == 0 and "is a voting member" in text, text
    voters = sorted(m.raft_addr for m in [*three, e])
    wait_until(lambda: same_state(c, [*rest, e], voters), 20, "the live members to agree on four voters")
    # The dead leader is removed; the three others carry on.
    removed = spur_admin(c, "remove", leader.raft_addr, via=[*rest, e])
    assert removed.returncode == 0, removed.stdout + removed.stderr
    want = sorted(m.raft_addr for m in [*rest, e])
    wait_until(lambda: same_state(c, [*rest, e], want), 20, "the three members to agree")


def test_empty_controllers_refuse_to_form_a_new_cluster_of_two(make_cluster):
    # Each refuses once the other answered that it holds no cluster; the other may then wait for an answer instead.
    c = make_cluster(2, start=False)
    c.start(wait=False)
    first = wait_until(lambda: next((m for m in c.members if not m.proc.alive()), None), 60, "a controller to refuse")
    assert first.proc.wait_exit(5) != 0
    log = first.proc.log_text()
    assert "a new cluster of 2 controllers cannot survive the loss of either; use 1, 3 or 5" in log, log
    assert not c.leaders()
