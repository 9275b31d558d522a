"""What only the leader does: schedule pending jobs, launch them on agents, time out silent nodes,
follow up cancels and time limits.

Liveness (last heartbeat per node) is kept in memory on the leader and never replicated: a new
leader gives every node a fresh grace period instead, so heartbeats cost no Raft entry.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from spur_hpc import auth, grpcutil
from spur_hpc.controller import eligibility, errors, fairshare, placement, preemption, priority
from spur_hpc.controller.dispatch_gate import DispatchGate
from spur_hpc.controller.scheduler import JobIndex, plan_starts
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.steplaunch import StepLauncher
from spur_hpc.controller.suspension import shown_state, suspended_secs
from spur_hpc.model import PENDING, REASON_NOT_RESPONDING, RUNNING, SUSPENDED
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc
from spur_hpc.protoconv import alloc_to_pb

log = logging.getLogger("spurctld.leader")

# Launch attempts of one job before the leader gives up: the job is held and the node drained, both with
# the last error (a constant, not a key: an administrator fixes the node, not the count).
LAUNCH_ATTEMPTS = 3
# The job waits PENDING this long after its first failed launch, twice as long after the next, up to the cap.
LAUNCH_RETRY_SECS = 2.0
LAUNCH_RETRY_MAX_SECS = 16.0
# Stamped on the leader's own drains, so an operator (and `spur node resume --if-reason-prefix`) tells them apart.
DRAIN_REASON_PREFIX = "spurctld: "
LAUNCH_RPC_TIMEOUT = 10.0
SIGNAL_RETRY_SECS = 5.0
TIME_LIMIT_GRACE_SECS = 60.0  # the supervisor enforces limits; the controller steps in only after this
# One job_priorities record holds at most this many [job id, priority] pairs (a queue of 100,000 takes ten).
PRIORITIES_PER_RECORD = 10_000
# A running job its agent does not hold for this long (while not being launched) is an orphan.
ORPHAN_GRACE_SECS = 15.0
# A blocked job for which preemption found nothing to stop is looked at again after this long, not at every plan
# (a plan runs at each submission, and the choice walks the running jobs on the nodes of the job's partition).
PREEMPT_RETRY_SECS = 5.0


class AgentClients:
    """One cached channel per agent address; every call carries this controller's credential."""

    def __init__(self, auth_type: str, munge_socket: str) -> None:
        self.auth_type, self.munge_socket = auth_type, munge_socket
        self._stubs: dict[str, slurm_pb2_grpc.SlurmAgentStub] = {}
        self._lock = threading.Lock()

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return auth.client_metadata(self.auth_type, self.munge_socket)

    def stub(self, address: str) -> slurm_pb2_grpc.SlurmAgentStub:
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                stub = slurm_pb2_grpc.SlurmAgentStub(grpcutil.channel(address))
                self._stubs[address] = stub
            return stub


class LeaderDuties:
    def __init__(
        self,
        service: ControllerService,
        job_to_pb: Callable[[dict[str, Any]], slurm_pb2.Job],
        bootstrap_cluster: Callable[[], None],
    ) -> None:
        self.service = service
        self.raft = service.raft
        self.conf = service.conf
        self.job_to_pb = job_to_pb
        self.bootstrap_cluster = bootstrap_cluster
        self.interval = self.conf.controller.scheduler_interval_ms / 1000.0
        self.timeout = float(self.conf.controller.heartbeat_timeout_secs)
        self.agents = AgentClients(self.conf.auth.type, self.conf.auth.munge_socket)
        self.pool = futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="launch")
        self.last_seen: dict[str, float] = {}
        self.last_seen_lock = threading.Lock()
        self.launching: set[tuple[int, int]] = set()
        self.dispatch = DispatchGate()  # launches on their way to each node (HoldDispatch waits for them)
        # Failed launches per job since it last launched or was held: (counted, tried, when the last one failed),
        # and when it may be tried again (leader memory: a new leader starts counting afresh, which still bounds
        # the attempts per leader).
        self.launch_failures: dict[int, tuple[int, int, float]] = {}
        self.retry_after: dict[int, float] = {}
        # Orphan detection, from the agents' own reports: pairs seen held, and pairs missing since when.
        self.held_seen: set[tuple[int, int]] = set()
        self.missing_since: dict[tuple[int, int], float] = {}
        self.signalled: dict[tuple[int, int], float] = {}
        self.preempt_quiet: dict[int, float] = {}  # blocked job -> when preemption may look for victims again
        self.was_leader = False
        self.led_term = -1  # the term of this member's last leadership (a regained majority keeps its bookkeeping)
        self.next_priority_calc = 0.0  # monotonic time of the next priority/multifactor recalculation
        # Pending and running jobs kept from the applied records: a wake-up looks at what changed, not at
        # every job (scheduler.JobIndex).
        self.jobs = JobIndex()
        self.jobs.levels_of = self.service.plan_levels  # under qos_priority, preemptors are planned first
        self.raft.add_state_listener(self.jobs.note)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="leader-duties", daemon=True)
        service.on_heartbeat = self.heartbeat_seen
        service.node_alive = self.node_alive
        self.steps = StepLauncher(self)  # srun's steps and salloc's allocations (controller/steplaunch.py)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)

    def poke(self) -> None:
        """Run the scheduler soon (a job was submitted or resources were freed)."""
        self.wake.set()

    def heartbeat_seen(self, name: str, running: list[tuple[int, int]]) -> None:
        """An agent reported in with the (job, attempt) pairs it holds: note liveness and orphans."""
        now = time.monotonic()
        with self.last_seen_lock:
            self.last_seen[name] = now
        held = set(running)
        expected = self.raft.read(
            lambda s: [
                (j["job_id"], j["attempt"])
                for j in s.jobs.values()
                if j["state"] == RUNNING
                and j["nodes"]
                and j["nodes"][0] == name
                and not j["spec"].get("interactive")  # an allocation without a batch step: nothing to hold
            ]
        )
        with self.last_seen_lock:
            for key in expected:
                if key in held:
                    self.held_seen.add(key)
                    self.missing_since.pop(key, None)
                elif key not in self.launching:
                    self.missing_since.setdefault(key, now)

    def node_alive(self, name: str) -> bool:
        """True unless this leader has heard nothing from the node's agent for heartbeat_timeout_secs."""
        with self.last_seen_lock:
            seen = self.last_seen.get(name)
        # Not judged yet (a new leader's grace period starts at its first tick): alive.
        return seen is None or not self.was_leader or time.monotonic() - seen <= self.timeout

    def last_seen_wall(self) -> dict[str, float]:
        """Last heartbeat per node as wall-clock time (only meaningful on the leader)."""
        if not self.was_leader:
            return {}
        offset = time.time() - time.monotonic()
        with self.last_seen_lock:
            return {name: seen + offset for name, seen in self.last_seen.items()}

    # -------------------------------------------------------------- loop

    def _loop(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(self.interval)
            self.wake.clear()
            if self.stopping.is_set():
                return
            try:
                self._tick()
            except errors.ControllerError as exc:
                log.info("leader duty deferred: %s", exc)
            except Exception:
                log.exception("leader duty failed")

    def _tick(self) -> None:
        if not self.raft.is_leader() or not self.raft.has_quorum():
            self.was_leader = False
            return
        if not self.was_leader:
            self._became_leader()
        self.bootstrap_cluster()
        self._check_heartbeats()
        self._check_orphans()
        self._recalculate_priorities()
        self._schedule()
        self._follow_up_running()

    def _became_leader(self) -> None:
        self.was_leader = True
        now = time.monotonic()
        names = self.raft.read(lambda s: [n for n, node in s.nodes.items() if node["registered"]])
        term = self.raft.term()
        if term == self.led_term:
            # The same leadership: a majority's answers were late for a moment (has_quorum; pysyncobj steps down
            # after leader_fallback), as on a loaded host every few seconds. Starting afresh then would never let
            # a job its agent lost reach ORPHAN_GRACE_SECS, nor a dead node its heartbeat timeout; the launches in
            # flight are still this leader's own.
            with self.last_seen_lock:
                for n in names:
                    self.last_seen.setdefault(n, now)
            log.info("leader at term %s again: a majority answers again; launches and orphan checks go on", term)
            return
        self.led_term = term
        with self.last_seen_lock:
            self.last_seen = {n: now for n in names}
        self.launching.clear()
        self.launch_failures.clear()
        self.retry_after.clear()
        self.signalled.clear()
        self.preempt_quiet.clear()
        self.held_seen.clear()
        self.missing_since.clear()
        self.next_priority_calc = 0.0  # a new leader recalculates at once
        log.info("became leader at term %s; %d nodes get a fresh heartbeat grace period", self.raft.term(), len(names))
        self.steps.resume_launches()  # steps the old leader recorded but may not have launched

    # -------------------------------------------------------------- heartbeats

    def _check_heartbeats(self) -> None:
        now = time.monotonic()
        registered = self.raft.read(
            lambda s: [(n, node["last_registered"]) for n, node in s.nodes.items() if node["registered"]]
        )
        for name, registration in registered:
            with self.last_seen_lock:
                seen = self.last_seen.setdefault(name, now)
            if now - seen > self.timeout:
                log.warning("node %s: no heartbeat for %.0f s: DOWN, its jobs NODE_FAIL", name, now - seen)
                # Carries the registration it judged: a registration that lands first makes it a no-op.
                self.service.write(
                    "node_lost",
                    name=name,
                    reason=REASON_NOT_RESPONDING,
                    time=self.service.clock(),
                    registration=registration,
                )

    def _check_orphans(self) -> None:
        """A job its agent does not hold: requeue it if it never started there, NODE_FAIL if it vanished."""
        now = time.monotonic()
        with self.last_seen_lock:
            due = [
                (key, key in self.held_seen)
                for key, since in self.missing_since.items()
                if now - since > ORPHAN_GRACE_SECS and key not in self.launching
            ]
            for key, _ in due:
                self.missing_since.pop(key, None)
                self.held_seen.discard(key)
        for (job_id, attempt), was_held in due:
            job = self.raft.read(lambda s, j=job_id: dict(s.jobs[j]) if j in s.jobs else None)
            if job is None or job["state"] != RUNNING or job["attempt"] != attempt:
                continue
            node = job["nodes"][0]
            if was_held:
                log.warning("job %s attempt %s: the agent on %s no longer holds it: NODE_FAIL", job_id, attempt, node)
                self.service.write(
                    "job_end",
                    job_id=job_id,
                    attempt=attempt,
                    state="NODE_FAIL",
                    exit_code=0,
                    signal=0,
                    time=self.service.clock(),
                    reason=f"the agent on {node} lost the job",
                    requeue=True,  # its node failed under it (a reboot): a requeue-able batch job runs again
                )
            else:
                self._launch_failed(job_id, attempt, node, f"the agent on {node} never started it")

    # -------------------------------------------------------------- priority/multifactor

    def _recalculate_priorities(self) -> None:
        """Every priority_calc_period: one job_priorities record with the pending jobs whose multifactor priority
        changed (age grows, usage decays, shares change), and the half-life the store's usage decays with, so
        every member orders the queue alike and charges usage alike (controller/priority.py, fairshare.py)."""
        conf = self.service.priority
        now = time.monotonic()
        if not conf.multifactor or now < self.next_priority_calc:
            return
        self.next_priority_calc = now + max(1, conf.calc_period_secs)
        now_wall = self.service.clock()

        def plan(s: Any) -> tuple[Any, bool] | None:
            if s.wal_level < 5:
                return None
            taken = priority.snapshot(s, now_wall, self.service.partitions, conf)
            differs = s.assoc is not None and fairshare.half_life(s.assoc) != conf.half_life_secs
            return taken, differs, bool(self.jobs.sync(s).running)

        planned = self.raft.read(plan)
        if planned is None:
            return
        taken, half_life_differs, running = planned
        changes = priority.changes(*taken)  # outside the state lock: 100,000 pending jobs take seconds
        for start in range(0, max(1, len(changes)), PRIORITIES_PER_RECORD):
            chunk = changes[start : start + PRIORITIES_PER_RECORD]
            charge = start == 0 and running  # the running jobs' usage so far, once a period
            if not chunk and not half_life_differs and not charge:
                return
            self.service.write(
                "job_priorities",
                priorities=chunk,
                half_life=conf.half_life_secs,
                time=now_wall,
                charge_running=charge,
            )
        if changes:
            log.info("priority/multifactor: %d pending jobs have a new priority", len(changes))

    # -------------------------------------------------------------- scheduling

    def _schedule(self) -> None:
        if self.retry_after:  # forget the pauses of jobs that left the queue meanwhile (cancelled, held)
            ids = list(self.retry_after)
            queued = (PENDING, RUNNING)
            waiting = self.raft.read(lambda s: {j for j in ids if j in s.jobs and s.jobs[j]["state"] in queued})
            for job_id in set(ids) - waiting:
                self.retry_after.pop(job_id, None)
                self.launch_failures.pop(job_id, None)
        now_wall = self.service.clock()
        ends = self.raft.read(lambda s: eligibility.pending_ends(s, now_wall, self.jobs.sync(s).with_deadline))
        for job_id, state, reason in ends:
            log.info("job %s ends %s while pending: %s", job_id, state, reason)
            try:
                self.service.write("job_pending_end", job_id=job_id, state=state, reason=reason, time=now_wall)
            except (errors.Conflict, errors.NotFound) as exc:  # gone meanwhile; the plan below still runs
                log.info("job %s not ended: %s", job_id, exc)
        blockers: list[int] = []  # the jobs that did not fit: what preemption may make room for
        plans = self.raft.read(lambda s: plan_starts(s, now_wall, self.jobs, self.service.partitions, blockers))
        now = time.monotonic()
        for job_id, nodes in plans:
            if self.retry_after.get(job_id, 0.0) > now:
                continue  # its last launch failed: it stays PENDING (its reason says why) until the pause ends
            # An array's own record stands for its pending tasks: the start splits the next one off.
            attempt, array = self.raft.read(
                lambda s, j=job_id: (s.jobs[j]["attempt"], bool(s.jobs[j].get("array_pending")))
            )
            op = "job_array_split" if array else "job_start"
            head = nodes[0]
            self.dispatch.begin(head)  # before the start is written: a HoldDispatch after it waits for this launch
            try:
                result = self.service.write(
                    op, job_id=job_id, nodes=nodes, attempt=attempt + 1, time=self.service.clock()
                )
            except errors.Conflict as exc:
                self.dispatch.end(head)
                log.info("job %s not started: %s", job_id, exc)
                continue
            except BaseException:
                self.dispatch.end(head)
                raise
            self._launch_async(result["job_id"], attempt + 1, head)
        if blockers and self.service.preempt_type == preemption.QOS_PRIORITY:
            self._preempt(blockers)

    def _preempt(self, blockers: list[int]) -> None:
        """qos_priority preemption for the jobs that blocked their partitions in this plan (after its starts were
        written, so the free map is what is left): each gets the victims controller/preemption.py chooses, unless
        victims preempted for it earlier are still ending (their cancel is on its way; the job starts when their
        end reports free the nodes). That is read from the records (a victim keeps preempted_by and its cancel's
        attempt), so a new leader does not preempt twice for one job either."""
        parts, now_wall, now = self.service.partitions, self.service.clock(), time.monotonic()
        blocked = set(blockers)
        self.preempt_quiet = {j: t for j, t in self.preempt_quiet.items() if t > now and j in blocked}
        wanted = [j for j in blockers if j not in self.preempt_quiet]
        if not wanted:
            return
        found_none: list[int] = []

        def decide(s: Any) -> list[tuple[int, list[preemption.Victim]]]:
            ending: dict[int, set[int]] = {}  # preemptor -> its victims whose cancel has not ended them yet
            for job_id in self.jobs.sync(s).running:
                job = s.jobs.get(job_id)
                if job is not None and job["state"] == RUNNING and job.get("preempt_cancel") == job["attempt"]:
                    ending.setdefault(int(job.get("preempted_by") or 0), set()).add(job_id)
            taken = set().union(*ending.values())
            free = placement.free_resources(s, now_wall, parts)
            decisions = []
            for job_id in wanted:
                job = s.jobs.get(job_id)
                if job is None or job["state"] != PENDING or job_id in ending:
                    continue
                victims = preemption.choose_victims(s, job, free, parts.preempt_mode, taken)
                if victims:
                    decisions.append((job_id, victims))
                    taken.update(v.job_id for v in victims)
                else:
                    found_none.append(job_id)
            return decisions

        decided = self.raft.read(decide)
        self.preempt_quiet.update((j, now + PREEMPT_RETRY_SECS) for j in found_none)

        for job_id, victims in decided:
            for victim in victims:
                try:
                    result = self.service.write(
                        "job_preempt",
                        job_id=victim.job_id,
                        attempt=victim.attempt,
                        by_job_id=job_id,
                        mode=victim.mode,
                        time=self.service.clock(),
                    )
                except (errors.Conflict, errors.NotFound) as exc:  # it ended or changed meanwhile
                    log.info("job %s not preempted for job %s: %s", victim.job_id, job_id, exc)
                    continue
                if result["mode"] == preemption.REQUEUE:  # its run's supervisor goes; the job waits in the queue
                    self.pool.submit(self.signal_job, victim.job_id, victim.attempt, list(victim.nodes), 0)
                    log.info("preempted job %s requeued to reclaim resources for job %s", victim.job_id, job_id)
                else:  # the follow-up below signals it as any cancel; its end report frees the nodes
                    log.info("preempted job %s is being killed to reclaim resources for job %s", victim.job_id, job_id)
        self.poke()

    def _launch_async(self, job_id: int, attempt: int, head: str) -> None:
        """Launch in the pool; `head` is counted in self.dispatch by the caller and uncounted here."""
        key = (job_id, attempt)
        if key in self.launching:
            self.dispatch.end(head)
            return
        self.launching.add(key)
        try:
            self.pool.submit(self._launch, job_id, attempt, head)
        except RuntimeError:  # the pool is shut down: this member stops leading
            self.launching.discard(key)
            self.dispatch.end(head)

    def _launch(self, job_id: int, attempt: int, head: str) -> None:
        """One LaunchJob call; a failure requeues the job (see _launch_failed) instead of retrying while RUNNING."""
        try:
            job = self.service.get_job(job_id)
            if job["state"] != RUNNING or job["attempt"] != attempt:
                return
            if job["spec"].get("interactive"):
                log.info("job %s attempt %s: an interactive allocation (no batch step to launch)", job_id, attempt)
                return
            head = job["nodes"][0]
            address = self.raft.read(lambda s: s.nodes[head]["address"])
            request = slurm_pb2.LaunchJobRequest(job=self.job_to_pb(job), alloc=alloc_to_pb(job, head))
            try:
                reply = self.agents.stub(address).LaunchJob(
                    request, timeout=LAUNCH_RPC_TIMEOUT, metadata=self.agents.metadata()
                )
            except grpc.RpcError as exc:
                error = f"{exc.code().name}: {exc.details()}"
                if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    self._launch_failed(job_id, attempt, head, f"{error} (agent address {address})")
                    return
                log.warning("job %s attempt %s: %s refused the launch (%s): FAILED", job_id, attempt, head, error)
                self.service.write(
                    "job_end",
                    job_id=job_id,
                    attempt=attempt,
                    state="FAILED",
                    exit_code=1,
                    signal=0,
                    time=self.service.clock(),
                    reason=f"launch refused: {error}",
                )
                self.poke()
                return
            self.launch_failures.pop(job_id, None)
            self.retry_after.pop(job_id, None)
            pid = reply.supervisor_pid
            log.info("job %s attempt %s launched on %s (supervisor pid %s)", job_id, attempt, head, pid)
        except errors.ControllerError as exc:
            log.warning("job %s attempt %s: %s", job_id, attempt, exc)
        except Exception:
            log.exception("launch of job %s failed", job_id)
        finally:
            self.launching.discard((job_id, attempt))
            self.dispatch.end(head)

    def _launch_failed(self, job_id: int, attempt: int, node: str, error: str) -> None:
        """Requeue a job whose launch failed; after LAUNCH_ATTEMPTS failures hold it and drain the node."""
        failures, tried, failed_at = self.launch_failures.get(job_id, (0, 0, 0.0))
        now = time.monotonic()
        with self.last_seen_lock:
            seen = self.last_seen.get(node, 0.0)
        # A failure counts toward the bound only when the node's agent reported in since the previous one: an
        # agent that heartbeats but cannot be reached is broken, while one that is restarting (an in-place
        # upgrade) is silent meanwhile, and its node must not be drained for it.
        if failures == 0 or seen > failed_at:
            failures += 1
        tried += 1
        reason = f"launch failed {failures} time{'s' if failures > 1 else ''} on {node}: {error}"
        final = failures >= LAUNCH_ATTEMPTS
        log.warning("job %s attempt %s: %s: %s", job_id, attempt, reason, "held, node drained" if final else "requeued")
        # Before the requeue: the scheduler must not start the job again the moment it is PENDING.
        self.launch_failures[job_id] = (failures, tried, now)
        self.retry_after[job_id] = now + min(LAUNCH_RETRY_SECS * 2 ** (tried - 1), LAUNCH_RETRY_MAX_SECS)
        result = self.service.write(
            "job_requeue",
            job_id=job_id,
            attempt=attempt,
            time=self.service.clock(),
            reason=reason if final else f"{reason}; retrying",
        )
        if not final:
            return
        try:
            # The node first: if the hold cannot be written (WAL level 1), the job at least goes elsewhere.
            drain_reason, now = DRAIN_REASON_PREFIX + reason, self.service.clock()
            self.service.write("node_drain", name=node, reason=drain_reason, set_by="spurctld", time=now)
            if result.get("state") == PENDING:
                self.service.write("job_hold", job_id=job_id, reason=reason)
        finally:
            self.launch_failures.pop(job_id, None)
            self.retry_after.pop(job_id, None)

    # -------------------------------------------------------------- cancels and time limits

    def signal_job(self, job_id: int, attempt: int, nodes: list[str], signal: int) -> bool:
        """Deliver a signal (0 = cancel the whole job) to the job's supervisor; True when delivered."""
        addresses = self.raft.read(lambda s: [s.nodes[n]["address"] for n in nodes if n in s.nodes])
        delivered = False
        for address in addresses[:1]:
            try:
                reply = self.agents.stub(address).SignalJob(
                    slurm_pb2.SignalJobRequest(job_id=job_id, attempt=attempt, signal=signal),
                    timeout=5.0,
                    metadata=self.agents.metadata(),
                )
                delivered = delivered or reply.delivered
            except grpc.RpcError as exc:
                log.info("signal %s to job %s on %s failed: %s", signal, job_id, address, exc.code().name)
        return delivered

    def suspend_job(self, job_id: int, attempt: int, nodes: list[str], resume: bool) -> None:
        """scontrol suspend / resume: SIGSTOP / SIGCONT (with SignalJobRequest.suspend, so each supervisor holds
        its time limit meanwhile) to the batch supervisor and to every running step's supervisor on its nodes."""
        sig = signal.SIGCONT if resume else signal.SIGSTOP
        job = self.service.get_job(job_id)
        targets = [("", nodes[:1])] + [
            (step_id, list(step["nodes"]))
            for step_id, step in (job.get("steps") or {}).items()
            if step_id != "batch" and step["state"] == RUNNING and step.get("attempt", attempt) == attempt
        ]
        if job["spec"].get("interactive"):
            targets = targets[1:]  # salloc's allocation has no batch supervisor
        for step_id, step_nodes in targets:
            addresses = self.raft.read(
                lambda st, names=step_nodes: [st.nodes[n]["address"] for n in names if n in st.nodes]
            )
            for address in addresses:
                request = slurm_pb2.SignalJobRequest(
                    job_id=job_id, attempt=attempt, signal=int(sig), step_id=step_id, suspend=True
                )
                try:
                    self.agents.stub(address).SignalJob(request, timeout=5.0, metadata=self.agents.metadata())
                except grpc.RpcError as exc:
                    log.warning("%s of job %s at %s failed: %s", sig.name, job_id, address, exc.code().name)

    def _follow_up_running(self) -> None:
        now_wall = self.service.clock()
        now = time.monotonic()
        running = self.raft.read(
            lambda s: [
                (
                    j["job_id"],
                    j["attempt"],
                    list(j["nodes"]),
                    j["cancel_requested"],
                    # a suspended job's limit waits: it counts from its start plus the time it spent suspended
                    j["start_time"] + suspended_secs(j),
                    0 if shown_state(j) == SUSPENDED else j["spec"].get("time_limit_secs") or 0,
                    bool(j["spec"].get("interactive")),
                )
                for j in (s.jobs.get(i) for i in sorted(self.jobs.sync(s).running))
                if j is not None and j["state"] == RUNNING
            ]
        )
        for job_id, attempt, nodes, cancel, started, limit, interactive in running:
            key = (job_id, attempt)
            if (job_id, attempt) in self.launching:
                continue
            if interactive:  # no supervisor ends it: the leader does (controller/steplaunch.py)
                if cancel or (limit and now_wall - started > limit):
                    self.steps.follow_up_interactive(job_id, attempt, cancel, not cancel)
                continue
            over_limit = limit and now_wall - started > limit + TIME_LIMIT_GRACE_SECS
            if not (cancel or over_limit):
                continue
            if now - self.signalled.get(key, 0.0) < SIGNAL_RETRY_SECS:
                continue
            self.signalled[key] = now
            self.pool.submit(self.signal_job, job_id, attempt, nodes, 0)
            self.pool.submit(self.steps.cancel_steps, job_id)
            if over_limit and not cancel:
                log.warning("job %s ran past its time limit and its supervisor did not stop it: TIMEOUT", job_id)
                self.service.write(
                    "job_end",
                    job_id=job_id,
                    attempt=attempt,
                    state="TIMEOUT",
                    exit_code=0,
                    signal=9,
                    time=now_wall,
                    reason="time limit (enforced by the controller)",
                )
