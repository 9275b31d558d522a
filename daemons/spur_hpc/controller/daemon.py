"""spurctld: the controller daemon's life cycle. Wires config, state directory, safe bootstrap, Raft, gRPC and probes
(what the probes and Ping answer is in controller/status.py)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any

import grpc

from spur_hpc import auth, buildinfo, grpcutil
from spur_hpc.accounting import SchemaTooNewError
from spur_hpc.conf import Config, ConfigError, load, read_secret
from spur_hpc.controller import bootstrap, errors, storage, wal
from spur_hpc.controller.accounting_link import AccountingLink
from spur_hpc.controller.authz import Authorizer
from spur_hpc.controller.grpc_api import (
    ControllerServicer,
    RaftInternalServicer,
    job_to_pb,
)
from spur_hpc.controller.leader import LeaderDuties
from spur_hpc.controller.membership import Membership
from spur_hpc.controller.metrics import ControllerCollector
from spur_hpc.controller.raft import RaftSettings, SpurRaft
from spur_hpc.controller.service import ControllerService
from spur_hpc.controller.status import MemberStatus
from spur_hpc.daemon import EXIT_FATAL, Daemon, StartupError, set_log_level
from spur_hpc.httpprobe import ProbeServer
from spur_hpc.model import CONTROLLER_GRPC_PORT, RAFT_PORT, normalize_addr, split_host_port
from spur_hpc.proto import raft_internal_pb2_grpc, slurm_pb2, slurm_pb2_grpc
from spur_hpc.release import selfupdate

log = logging.getLogger("spurctld")

# Ops after which the scheduler should look again at once.
_SCHEDULING_OPS = frozenset(
    {"job_submit", "job_end", "job_cancel", "job_requeue", "node_register", "node_resume", "job_release"}
)
JOINING_MARKER = "joining"


class ControllerDaemon(MemberStatus, Daemon):
    program = "spurctld"
    description = "Spur controller: one replica of the Raft-replicated cluster state."
    conf_role = "controller"

    def __init__(self) -> None:
        super().__init__()
        self.conf: Config | None = None
        self.raft: SpurRaft | None = None
        self.service: ControllerService | None = None
        self.duties: LeaderDuties | None = None
        self.membership: Membership | None = None
        self.grpc_server: grpcutil.AioServer | None = None
        self.probe: ProbeServer | None = None
        self.members: list[str] = []
        self.had_data = False
        self.identity: dict[str, Any] | None = None
        self.joining: bootstrap.Decision | None = None
        self.phase = "starting"
        self.watcher: threading.Thread | None = None
        self.last_announce = 0.0
        self.raft_stopped_for_stall = False
        self.identity_changed = threading.Event()
        self.accounting: AccountingLink | None = None
        self.last_step_down = 0.0
        self.last_removal_check = 0.0
        self.removed_while_away = False
        self.not_serving_since: float | None = None  # when serving_problem() first said why (the exit's grace)

    # ---------------------------------------------------------------- configuration

    def configure(self, args: argparse.Namespace) -> None:
        self.conf = load(args.conf, role=self.conf_role)
        if not args.log_level:
            set_log_level(self.conf.log.level)
        c = self.conf.controller
        self.raft_addr = normalize_addr(c.raft_addr, RAFT_PORT)
        self.grpc_addr = normalize_addr(c.listen_addr, CONTROLLER_GRPC_PORT)
        self.peers = [normalize_addr(p, RAFT_PORT) for p in c.peers]
        self.hosts = [normalize_addr(h, CONTROLLER_GRPC_PORT) for h in c.hosts]
        self.secret = read_secret(c.raft_secret_file)
        self.paths = storage.StatePaths(c.state_dir)
        self.accounting = AccountingLink(self.conf)
        try:
            self.authz = Authorizer(self.conf)
        except errors.Unavailable as exc:
            raise StartupError(str(exc)) from None
        if len(self.peers) > 1 and len(self.hosts) < len(self.peers):
            raise StartupError(
                f"[controller] hosts lists {len(self.hosts)} controllers but peers lists {len(self.peers)}; "
                "hosts must give the gRPC address of every controller so an empty member can ask them at start"
            )
        if c.heartbeat_timeout_secs < 30:
            log.warning(
                "[controller] heartbeat_timeout_secs = %s: an agent restart longer than that marks the node DOWN "
                "and fails its jobs; 30 s or more is safer (60 is the default)",
                c.heartbeat_timeout_secs,
            )

    def reload(self) -> None:
        """SIGHUP: read spur.conf again and apply its [partitions.NAME] tables and [scheduler] section, as
        `scontrol reconfigure` does for Slurm's partitions; every other key takes a restart. A file that does
        not load keeps the partitions as they were."""
        try:
            fresh = load(self.conf.path, role=self.conf_role)
        except ConfigError as exc:
            log.error("SIGHUP: %s; the partitions stay as they were", exc)
            return
        if self.service is not None:  # only the partitions: the other keys stay as this start read them
            self.service.set_partitions(fresh)
        log.info(
            "SIGHUP: %d [partitions] table(s) and [scheduler] read again from %s", len(fresh.partitions), fresh.path
        )

    # ---------------------------------------------------------------- start

    def start(self) -> None:
        # The journal, snapshots and meta files hold every job's script and environment: whatever the
        # umask we were started with, what this process creates is for its own user only.
        os.umask(0o077)
        try:
            storage.prepare(self.paths)
            storage.tighten_state_dir(self.paths.state_dir)
            self._forget_unfinished_join()
            self.had_data = storage.has_data(self.paths)
            self.identity = storage.read_identity(self.paths)
            if self.had_data and self.identity is None:
                self.identity = storage.recover_identity(self.paths)
        except storage.StorageError as exc:
            raise StartupError(str(exc)) from None
        try:
            self.accounting.migrate_at_start(buildinfo.build())
        except SchemaTooNewError as exc:
            raise StartupError(str(exc)) from None
        except errors.Unavailable as exc:
            raise StartupError(f"[accounting] {exc}") from None
        self._start_servers()
        self.members = self._choose_membership()
        settings = RaftSettings(
            self_addr=self.raft_addr,
            other_addrs=tuple(m for m in self.members if m != self.raft_addr),
            journal_file=self.paths.journal,
            dump_file=self.paths.dump,
            password=self.secret,
            append_entries_period=self.conf.controller.append_entries_period_ms / 1000,
            election_min=self.conf.controller.election_timeout_min_ms / 1000,
            election_max=self.conf.controller.election_timeout_max_ms / 1000,
            leader_fallback=self.conf.controller.leader_fallback_ms / 1000,
            connection_retry=self.conf.controller.connection_retry_ms / 1000,
            compaction_entries=self.conf.controller.log_compaction_entries,
            compaction_job_ratio=self.conf.controller.log_compaction_job_ratio,
            hold_elections=self.joining is not None,
            min_free_disk_mb=self.conf.controller.min_free_disk_mb,
        )
        self._check_raft_port()
        try:
            self.raft = SpurRaft(settings)
        except Exception as exc:
            raise StartupError(
                f"[controller] raft_addr {self.raft_addr}: cannot start Raft there ({exc}); "
                "is another spurctld using it, or is the address not on this host?"
            ) from None
        self.service = ControllerService(self.conf, self.raft, self.member_grpc)
        self.duties = LeaderDuties(self.service, job_to_pb, self._bootstrap_cluster)
        self.membership = Membership(
            self.raft, self.service.write, self._ping_member, self.conf.controller.catch_up_timeout_secs
        )
        self.raft.add_apply_listener(self._on_apply)
        self.raft.start()
        self.duties.start()
        self.accounting.start(self.service)
        self.phase = "joining" if self.joining else "running"
        self.watcher = threading.Thread(target=self._watch, name="member-watch", daemon=True)
        self.watcher.start()
        # [update]: in the background, so a slow or unreachable index never delays the start
        current = (buildinfo.version(), buildinfo.build())
        threading.Thread(
            target=selfupdate.startup_check, args=(self.conf.update, current, log), name="update-check", daemon=True
        ).start()
        log.info(
            "Raft member %s with peers %s (grpc %s, probes %s)",
            self.raft_addr,
            ", ".join(settings.other_addrs) or "none",
            self.grpc_addr,
            self.conf.controller.probe_addr,
        )

    def _forget_unfinished_join(self) -> None:
        """A member that crashed while still catching up holds a partial copy: start it empty again."""
        marker = os.path.join(self.paths.state_dir, JOINING_MARKER)
        if not os.path.exists(marker):
            return
        log.warning(
            "this member stopped before it caught up with the cluster last time: discarding its partial "
            "copy and asking the peers again"
        )
        for path in (self.paths.journal, self.paths.journal + ".meta", self.paths.dump, self.paths.identity):
            if os.path.exists(path):
                os.unlink(path)
        os.unlink(marker)

    def _start_servers(self) -> None:
        try:
            # grpc.aio on one loop thread: the coroutine handlers run there, the others in
            # the grpc_workers pool (docs/controller.md, "The API server")
            server, _port = grpcutil.create_aio_server(self.grpc_addr, self.conf.controller.grpc_workers)
            server.add(slurm_pb2_grpc.add_SlurmControllerServicer_to_server, ControllerServicer(self))
            server.add(raft_internal_pb2_grpc.add_RaftInternalServicer_to_server, RaftInternalServicer(self))
            server.start()
            self.grpc_server = server
            self.probe = ProbeServer(self.conf.controller.probe_addr, self.probe_routes())
            self.collector = ControllerCollector(self.status, self._state_reader)
            self.probe.start()
        except OSError as exc:
            raise StartupError(str(exc)) from None

    def _choose_membership(self) -> list[str]:
        if self.had_data:
            if self.identity:
                committed = sorted(self.identity["members"])
                if self.raft_addr not in committed:
                    raise StartupError(
                        f"refusing to start: this controller ({self.raft_addr}) was removed from cluster "
                        f"{self.identity['cluster_name']!r} (members now {', '.join(committed)}); to add it again, "
                        "empty its state_dir and run spur admin raft add on a member"
                    )
                if sorted(self.peers) != committed:
                    log.warning(
                        "[controller] peers (%s) differ from this cluster's committed membership (%s); running with "
                        "the committed membership (spur admin raft add|remove changes it)",
                        ", ".join(sorted(self.peers)),
                        ", ".join(committed),
                    )
                return committed
            log.warning("this member holds Raft data but no cluster identity yet; using [controller] peers")
            return sorted(self.peers)
        others = [h for h in self.hosts if h != self.grpc_addr]
        if len(self.peers) == 1 and not others:
            log.info("empty Raft store and no peers: bootstrapping a one-controller cluster")
            return list(self.peers)
        self.phase = "probing"
        decision = bootstrap.decide(
            others,
            self.raft_addr,
            self.conf.cluster.name,
            self.conf.controller.bootstrap_probe_timeout_secs,
            stop=self.stopping.is_set,
            wait_limit=self.conf.controller.bootstrap_wait_secs,
            credential=lambda: auth.client_metadata(self.conf.auth.type, self.conf.auth.munge_socket),
        )
        if decision.action == "refuse":
            raise StartupError(f"refusing to start: {decision.message}")
        log.info(decision.message)
        if decision.action == "join":
            self.joining = decision
            storage.atomic_write(os.path.join(self.paths.state_dir, JOINING_MARKER), b"joining\n")
            return sorted(decision.members)
        if len(self.peers) == 2:  # allowed in a running cluster (a membership change passes through it), not new
            raise StartupError(
                "refusing to start: [controller] peers: a new cluster of 2 controllers cannot survive the loss of "
                "either; use 1, 3 or 5 controllers"
            )
        return sorted(self.peers)

    def _check_raft_port(self) -> None:
        """pysyncobj retries a failed bind forever in silence; find out first and say so."""
        host, port = split_host_port(self.raft_addr)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise StartupError(
                    f"[controller] raft_addr {self.raft_addr}: cannot listen there ({exc.strerror}); "
                    "is another spurctld using it, or is the address not on this host?"
                ) from None

    def _bootstrap_cluster(self) -> None:
        """Called on the leader: give a fresh cluster its name, id, membership and WAL level once."""
        if self.raft.read(lambda s: bool(s.cluster_id)):
            return
        self.service.write(
            "cluster_init",
            name=self.conf.cluster.name,
            cluster_id=str(uuid.uuid4()),
            members=self.members,
            wal_level=wal.MAX_WAL_LEVEL,
        )
        log.info("initialised cluster %s", self.conf.cluster.name)

    # ---------------------------------------------------------------- background watch

    def _on_apply(self, record: dict[str, Any], result: dict[str, Any]) -> None:
        if record.get("op") == "cluster_init":
            self.identity_changed.set()
        if record.get("op") in _SCHEDULING_OPS and self.duties is not None and self.raft.is_leader():
            self.duties.poke()

    def _watch(self) -> None:
        while not self.stopping.is_set():
            self.identity_changed.wait(0.2)
            self.identity_changed.clear()
            if self._exit_if_not_serving():
                return
            if not self.raft.core_alive():
                continue  # nothing below can work without the core; the grace runs out above
            try:
                self._watch_once()
            except Exception:
                log.exception("member watch failed")

    def _exit_if_not_serving(self) -> bool:
        """A member whose Raft core died, or that had no leader for leaderless_exit_secs, neither votes, replicates
        nor applies (or cannot reach those that do): staying up only looks healthy to its supervisor. /readyz says
        503 at once (status.py); after fatal_exit_grace_secs, time for probes to take it out, it exits with
        EXIT_FATAL so systemd (Restart=on-failure) or Kubernetes restarts it. True once the stop is requested."""
        if self.stopping.is_set():
            return True  # a stop under way ends the core on purpose: nothing to report
        problem = self.serving_problem()
        if problem is None:
            if self.not_serving_since is not None:
                log.warning("a leader is known again: this controller serves again and stays up")
                self.not_serving_since = None
            return False
        grace = self.conf.controller.fatal_exit_grace_secs
        now = time.monotonic()
        if self.not_serving_since is None:
            self.not_serving_since = now
            log.error(
                "%s: /readyz answers 503 and spurctld exits with status %d in %g s so its service restarts it",
                problem,
                EXIT_FATAL,
                grace,
            )
        if now - self.not_serving_since < grace:
            return False
        self.request_stop(EXIT_FATAL)
        return True

    def _watch_once(self) -> None:
        raft = self.raft
        snapshot = raft.read(
            lambda s: (s.cluster_name, s.cluster_id, list(s.members), s.stalled, s.member_info.get(self.raft_addr))
        )
        name, cluster_id, members, stalled, my_info = snapshot
        if stalled is not None and not self.raft_stopped_for_stall:
            self.raft_stopped_for_stall = True
            self.phase = "stalled"
            log.critical(
                "this controller cannot read the replicated log (%s); it left the Raft cluster and keeps "
                "answering probes. Install a release that reads it, then restart spurctld",
                stalled["reason"],
            )
            raft.stop()
            return
        if self.raft_stopped_for_stall:
            return
        self._save_identity(name, cluster_id, members)
        self._step_down_if_disk_full()
        if raft.removed and self.joining is None:
            self._stop_removed(f"cluster {name!r} (members now {', '.join(members)})")
            return
        self._check_removal_while_away(cluster_id)
        if self.joining is not None:
            target = self.joining.commit_index
            # A learner votes once promoted (its address among the members); a member that lost its state at once.
            if cluster_id == self.joining.cluster_id and raft.applied_index() >= target and self.raft_addr in members:
                raft.release_elections()
                os.unlink(os.path.join(self.paths.state_dir, JOINING_MARKER))
                self.joining = None
                self.phase = "running"
            return
        mine = {
            "grpc_addr": self.grpc_addr,
            "version": buildinfo.version(),
            "build": buildinfo.build(),
            "max_level": wal.MAX_WAL_LEVEL,
        }
        now = time.monotonic()
        if cluster_id and my_info != mine and raft.leader_addr() and now - self.last_announce > 2.0:
            self.last_announce = now
            threading.Thread(target=self._announce, args=(mine,), daemon=True).start()

    def _stop_removed(self, what: str) -> None:
        log.warning(
            "this controller was removed from %s: stopping; to add it again, empty its state_dir and run "
            "spur admin raft add on a member",
            what,
        )
        self.request_stop()

    def _check_removal_while_away(self, cluster_id: str) -> None:
        """A member removed while it was down hears from no leader (the voters dropped it): after a few election
        timeouts without one, ask the peers every 10 s whether the cluster still lists it."""
        raft = self.raft
        # A member killed within a second of its last entries replays nothing before a leader tells it the commit
        # index (pysyncobj stores it once a second): its identity file names the cluster then.
        cluster_id = cluster_id or (self.identity or {}).get("cluster_id", "")
        patience = 5 * self.conf.controller.election_timeout_max_ms / 1000
        now = time.monotonic()
        if not cluster_id or raft.leaderless_secs() < patience or now - self.last_removal_check < 10.0:
            return
        self.last_removal_check = now
        others = [h for h in self.hosts if h != self.grpc_addr]

        def ask() -> None:
            timeout = self.conf.controller.bootstrap_probe_timeout_secs
            credential = lambda: auth.client_metadata(self.conf.auth.type, self.conf.auth.munge_socket)  # noqa: E731
            answers = [
                bootstrap.probe_peer(h, self.raft_addr, self.conf.cluster.name, timeout, credential) for h in others
            ]
            peer = bootstrap.removed_by(answers, self.raft_addr, cluster_id, self.raft.commit_index())
            if peer is not None and self.raft.leader_addr() is None:
                members = list(peer.reply.members)
                # What the cluster committed, so that the next start refuses (stop() leaves it as it is).
                self.removed_while_away = True  # first: _save_identity no longer writes the local view
                storage.write_identity(self.paths, peer.reply.cluster_name, cluster_id, members)
                self._stop_removed(
                    f"cluster {peer.reply.cluster_name!r} while it was away (peer {peer.host} lists "
                    f"members {', '.join(members)})"
                )

        threading.Thread(target=ask, name="removal-check", daemon=True).start()

    def _step_down_if_disk_full(self) -> None:
        """A leader that cannot write its journal hands leadership to a member that can."""
        raft = self.raft
        if not raft.is_leader() or len(self.members) < 2 or time.monotonic() - self.last_step_down < 5.0:
            return
        try:
            raft.disk.check()
        except Exception as exc:
            self.last_step_down = time.monotonic()
            log.warning("%s; handing leadership to another controller", exc)
            raft.transferLeadership()

    def _save_identity(self, name: str, cluster_id: str, members: list[str]) -> None:
        if self.removed_while_away:
            return
        if cluster_id and (
            self.identity is None
            or self.identity.get("cluster_id") != cluster_id
            or sorted(self.identity.get("members", [])) != sorted(members)
            or not os.path.exists(self.paths.identity)
        ):
            storage.write_identity(self.paths, name, cluster_id, members)
            self.identity = storage.read_identity(self.paths)

    def _announce(self, mine: dict[str, Any]) -> None:
        try:
            self.service.write("member_announce", raft_addr=self.raft_addr, **mine)
        except Exception as exc:
            log.info("member announce deferred: %s", exc)

    # ---------------------------------------------------------------- actions the RPCs ask for

    def membership_or_unavailable(self) -> Membership:
        if self.membership is None:
            raise errors.Unavailable("this controller is still starting; ask again")
        return self.membership

    def _ping_member(self, grpc_addr: str) -> slurm_pb2.PingReply | None:
        """A member's own Ping (its applied index and role), or None when it does not answer within 1 s."""
        if grpc_addr == self.grpc_addr:
            return self.ping_reply()
        try:
            metadata = auth.client_metadata(self.conf.auth.type, self.conf.auth.munge_socket)
            with grpcutil.channel(grpc_addr) as ch:
                return slurm_pb2_grpc.SlurmControllerStub(ch).Ping(
                    slurm_pb2.PingRequest(), timeout=1.0, metadata=metadata
                )
        except (grpc.RpcError, auth.AuthError):
            return None

    def poke_scheduler(self) -> None:
        if self.duties is not None:
            self.duties.poke()

    def kill_job_everywhere(self, job_id: int) -> None:
        job = self.service.get_job(job_id)
        if self.raft.is_leader():
            self.duties.pool.submit(self.duties.signal_job, job_id, job["attempt"], job["nodes"], 0)

    # ---------------------------------------------------------------- stop

    def stop(self) -> None:
        if self.duties is not None:
            self.duties.stop()
        if self.accounting is not None:
            self.accounting.stop()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace=2).wait(3)
        if self.probe is not None:
            self.probe.stop()
        if self.raft is not None and not self.raft_stopped_for_stall:
            self.raft.stop()
            name, cluster_id, members = self.raft.read(lambda s: (s.cluster_name, s.cluster_id, list(s.members)))
            if self.joining is None:
                self._save_identity(name, cluster_id, members)


def main(argv: list[str] | None = None) -> int:
    return ControllerDaemon().main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
