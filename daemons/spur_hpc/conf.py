"""spur.conf (TOML) -> one typed, validated Config object.

Every problem is reported as one ConfigError line that names the section, the key, the value and the fix.
SCHEMA below declares each key once (type, default, bounds, docs text): the section objects, the checks of
types and bounds, and the key reference in docs/configuration.md (tools/gen_conf_docs.py) all come from it.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
import stat
import tomllib
from dataclasses import dataclass, field, make_dataclass
from typing import Any

from spur_hpc.auth import DEFAULT_MUNGE_SOCKET
from spur_hpc.model import (
    AGENT_GRPC_PORT,
    CONTROLLER_GRPC_PORT,
    MAX_FEATURES,
    MAX_GRES_COUNT,
    MAX_GRES_KINDS,
    RAFT_PORT,
    TIME_LIMIT_FORMS,
    InvalidValue,
    expand_hostlist,
    normalize_addr,
    parse_time_limit,
    split_host_port,
)

DEFAULT_CONF_PATH = "/etc/spur/spur.conf"

HOUR = 3600
YEAR = 365 * 86_400
NOT_AN_ADDRESS = -1  # Key.port of keys that are not addresses


class ConfigError(Exception):
    """A bad spur.conf: the message is one line naming the key, the value and the fix."""


@dataclass(frozen=True)
class Key:
    """One spur.conf key. Numbers must be finite; `above` is an exclusive lower bound, `min` and `max` inclusive."""

    type: type  # int, float, str, bool, or list (of strings)
    default: Any
    help: str  # the "meaning" column of the docs
    min: float | None = None
    above: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str = ""  # full match for a string (or each list item)
    pattern_text: str = ""  # the pattern in words, for the error's fix
    path: bool = False  # an absolute path
    port: int | None = NOT_AN_ADDRESS  # an address: host:port, this port when omitted (None: the port is required)
    shown_default: str = ""  # the docs' default, when the real one is derived at run time
    unlimited: bool = False  # an int key that also takes "UNLIMITED" (or "INFINITE"), stored as 0
    time_limit: bool = False  # a str key holding a Slurm time limit (model.parse_time_limit's forms)

    def accepts(self) -> str:
        """What the key accepts, in words: the docs' "accepts" column and the fix of a bound error."""
        if self.type in (int, float):
            words = "an integer" if self.type is int else "a number"
            if self.above is not None:
                words += f" above {_number(self.above)}"
            elif self.min is not None:
                words += f" from {_number(self.min)}"
            if self.max is not None:
                words += f" to {_number(self.max)}" if self.above is None else f", at most {_number(self.max)}"
            return words + (" or UNLIMITED" if self.unlimited else "")
        if self.type is bool:
            return "true or false"
        if self.choices:
            return ", ".join(self.choices[:-1]) + " or " + self.choices[-1]
        if self.time_limit:
            return f"a time limit: {TIME_LIMIT_FORMS}"
        one = "host:port" if self.port != NOT_AN_ADDRESS else "absolute path" if self.path else "string"
        if self.pattern_text:
            one = f"{one} of {self.pattern_text}"
        if self.type is not list:
            return one
        return "list of strings" if one == "string" else f"list of {one} strings"

    @property
    def optional(self) -> bool:
        """An empty string means "not set" (the value is derived, or the feature is off)."""
        return self.default in ("", [])


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


_NAME = r"[A-Za-z0-9_-]{1,63}"
# [auth] private_data's categories (Slurm's PrivateData, those Spur implements); only spurctld checks them
PRIVATE_DATA_CATEGORIES = ("jobs", "usage")
# [accounting] enforce's words (Slurm's AccountingStorageEnforce, those Spur implements)
ENFORCE_WORDS = ("associations", "limits", "qos", "safe")
# What each word turns on, as in Slurm: limits and qos imply associations, safe implies limits.
ENFORCE_IMPLIES = {
    "associations": ("associations",),
    "limits": ("limits", "associations"),
    "qos": ("qos", "associations"),
    "safe": ("safe", "limits", "associations"),
}


def enforce_flags(words: Any) -> tuple[str, ...]:
    """[accounting] enforce's words with what they imply, in ENFORCE_WORDS' order (Slurm prints them so:
    AccountingStorageEnforce=associations,limits,qos)."""
    on = {implied for word in words or () for implied in ENFORCE_IMPLIES.get(word, (word,))}
    return tuple(word for word in ENFORCE_WORDS if word in on)


_NODE = r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}"

_GRES_NAME = r"[A-Za-z0-9_.-]{1,64}"
_GRES_ENTRY = rf"{_GRES_NAME}(:{_GRES_NAME})?=[0-9]{{1,7}}"
_FEATURE = r"[A-Za-z0-9_.:=-]{1,64}"


def parse_gres_offer(text: str) -> dict[str, int]:
    """[agent] gres as written (gpu=2,gpu:a100=1; checked against its pattern) -> {"gpu": 2, "gpu:a100": 1}."""
    offer: dict[str, int] = {}
    for entry in text.split(",") if text else []:
        key, _eq, count = entry.partition("=")
        offer[key] = int(count)
    return offer


def parse_gres_files(entries: list[str]) -> dict[str, list[str]]:
    """[agent] gres_files as written (["gpu=/dev/nvidia0", "gpu=/dev/nvidia1"]) -> {"gpu": [paths in index order]}."""
    files: dict[str, list[str]] = {}
    for entry in entries:
        key, _eq, path = entry.partition("=")
        files.setdefault(key, []).append(path)
    return files


# section -> key -> Key: the one declaration of every key, in the order of the docs.
SCHEMA: dict[str, dict[str, Key]] = {
    "cluster": {
        "name": Key(
            str,
            "spur",
            "The cluster's name. It is fixed when the cluster is first bootstrapped; a controller whose peers "
            "report another name refuses to start.",
            pattern=_NAME,
            pattern_text="letters, digits, `-` and `_`",
        ),
    },
    "controller": {
        "hosts": Key(
            list,
            [],
            "gRPC addresses of every controller (port 6817 when omitted). Agents and commands try them in turn; "
            "an empty controller asks each of them at start whether a cluster already exists. Must list every "
            "controller named in `peers`; a single controller lists only itself (or nothing).",
            port=CONTROLLER_GRPC_PORT,
        ),
        "listen_addr": Key(
            str,
            f"0.0.0.0:{CONTROLLER_GRPC_PORT}",
            'This controller\'s gRPC address. With `[auth] type = "none"` it must be a loopback address '
            "(127.0.0.0/8, `::1`, `localhost`) unless `[auth] allow_unauthenticated_network = true`.",
            port=CONTROLLER_GRPC_PORT,
        ),
        "raft_addr": Key(
            str,
            "",
            "This controller's Raft address, `host:port` on an address of this host (port 6821 when omitted). "
            "The Raft port is bound to this address only, never to all interfaces.",
            port=RAFT_PORT,
            shown_default="(required)",
        ),
        "peers": Key(
            list,
            [],
            "Raft addresses of every controller, this one included: 1, 3 or 5 entries, each once (2 only on the way "
            "from 3 to 2 to 3, as remove_controllers writes them: empty controllers refuse to form a new cluster of "
            'two). A controller that holds data runs with the committed membership instead; see "Changing the '
            'controllers" below.',
            port=RAFT_PORT,
            shown_default="(required)",
        ),
        "probe_addr": Key(
            str,
            "127.0.0.1:6822",
            "HTTP probes: `/status`, `/livez`, `/readyz`, `/metrics`, `/metrics/nodes`. Keep it on loopback or "
            "a management network.",
            port=None,
        ),
        "state_dir": Key(
            str,
            "/var/lib/spur/ctld",
            "Raft journal (`raft.journal`, `raft.journal.meta`), snapshot (`raft.dump`) and the cluster identity "
            "(`cluster.json`). Created with mode 0700.",
            path=True,
        ),
        "raft_secret_file": Key(
            str,
            "/etc/spur/raft.secret",
            "A shared secret, identical on every controller, that encrypts and authenticates the Raft traffic. "
            "The file must be a regular file with mode 0600 (no group or other bits). Create one with "
            "`openssl rand -hex 32 > /etc/spur/raft.secret; chmod 0600 /etc/spur/raft.secret`.",
            path=True,
        ),
        "heartbeat_timeout_secs": Key(
            int,
            60,
            "An agent that has not sent a heartbeat for this long is marked DOWN and its running jobs NODE_FAIL "
            "(a requeue-able batch job goes back to the queue instead: `job_requeue`). "
            "It is also the longest agent restart that goes unnoticed, so keep it at 30 or more (the controller "
            "warns below 30).",
            min=1,
            max=7 * 86_400,
        ),
        "scheduler_interval_ms": Key(
            int,
            200,
            "How often the leader's scheduler runs when nothing wakes it earlier (a submission or a finished job "
            "wakes it at once).",
            min=1,
            max=60_000,
        ),
        "job_requeue": Key(
            bool,
            True,
            "Slurm's `JobRequeue`: whether a batch job submitted without `--requeue` or `--no-requeue` may be "
            "requeued, by `scontrol requeue` or when its node fails (it then runs again, SLURM_RESTART_COUNT "
            "counting the runs). Read when a job is submitted, and kept with it. Needs WAL level 3.",
        ),
        "write_timeout_secs": Key(
            float,
            5.0,
            'Deadline of one replicated write. A write that misses it is answered UNAVAILABLE with "outcome '
            'unknown"; commands retry submissions with the same idempotency key, so a retry never creates a '
            "second job.",
            above=0,
            max=HOUR,
        ),
        "grpc_workers": Key(
            int,
            128,
            "Threads of the gRPC server for the calls that block (all but Heartbeat, which runs on its event loop); "
            "an in-flight write among them holds one while it waits for the Raft commit.",
            min=1,
            max=4096,
        ),
        "append_entries_period_ms": Key(
            int,
            50,
            "The leader's heartbeat (an AppendEntries to each follower when it has nothing else to send). New "
            "entries do not wait for it: they are sent in the tick they arrive in, and the followers are told of their "
            "commit at once too. Each heartbeat costs the leader "
            "and the followers CPU (an idle cluster of 3 used about twice as much at 20 ms). Must be under a third "
            "of `election_timeout_min_ms`.",
            min=1,
            max=10_000,
        ),
        "election_timeout_min_ms": Key(int, 300, "Lower bound of the randomised election timeout.", min=1, max=600_000),
        "election_timeout_max_ms": Key(
            int,
            800,
            "Upper bound. Lower timeouts fail over faster but risk needless elections on a loaded host.",
            min=1,
            max=600_000,
        ),
        "leader_fallback_ms": Key(
            int,
            1000,
            "A leader that has not heard from a majority for this long steps down (writes and leader duties go to "
            "the new leader). Its `/metrics/nodes` probe stops answering 200 sooner, after half of "
            "`election_timeout_min_ms` (or this, if shorter), before another controller can be elected.",
            min=1,
            max=600_000,
        ),
        "connection_retry_ms": Key(
            int,
            250,
            "Reconnect interval between controllers. Must stay below `election_timeout_min_ms`, or a restarted "
            "controller may depose a healthy leader before it is reconnected.",
            min=1,
            max=600_000,
        ),
        "leaderless_exit_secs": Key(
            float,
            300.0,
            "A controller that has neither heard from a leader nor been one for this long (a partition that keeps "
            "it in a minority, a Raft core stuck in a journal write) answers 503 on `/readyz` and exits with "
            "status 70 after `fatal_exit_grace_secs`, so systemd or Kubernetes restarts it. Keep it well above "
            "`election_timeout_max_ms`; `0` never exits for this (a dead Raft core still does).",
            min=0,
            max=YEAR,
        ),
        "fatal_exit_grace_secs": Key(
            float,
            15.0,
            "Between the moment a controller stops serving (its Raft core died, or `leaderless_exit_secs` passed) "
            "and its exit with status 70, `/readyz` answers 503, long enough for a load balancer or a Kubernetes "
            "readiness probe to stop sending it traffic. A leader that comes back within it cancels the exit.",
            min=0,
            max=HOUR,
        ),
        "log_compaction_entries": Key(
            int,
            5000,
            "Journal entries between snapshots, at least (see `log_compaction_job_ratio`).",
            min=1,
            max=10**9,
        ),
        "log_compaction_job_ratio": Key(
            float,
            1.0,
            "A snapshot also waits until the journal holds this many entries for each job the previous snapshot "
            "held: writing one costs in proportion to the state, so with 1.0 its cost per entry stays the same at "
            "100,000 jobs as at 100 (a queue of N jobs is written every N entries), and the journal holds about as "
            "many entries as the state holds jobs. 0 snapshots every `log_compaction_entries` entries whatever the "
            "state's size (with 50,000 jobs a snapshot writer then ran beside the controllers nearly all the time, "
            "and submissions ran at half their rate).",
            min=0,
            max=1000,
        ),
        "bootstrap_probe_timeout_secs": Key(
            float,
            2.0,
            "Deadline of one ClusterProbe call when a controller with an empty state directory asks its peers.",
            above=0,
            max=HOUR,
        ),
        "catch_up_timeout_secs": Key(
            float,
            120.0,
            "`spur admin raft add`: a new controller that has not caught up with the leader this long after the "
            "add began is not promoted and is taken out again (the command says why). `--timeout` overrides it for "
            "one add; the leader's value counts.",
            above=0,
            max=24 * HOUR,
        ),
        "bootstrap_wait_secs": Key(
            float,
            0.0,
            "How long an empty controller waits for unreachable peers before it gives up and exits. `0` waits "
            "forever, which is the safe choice: a peer that does not answer may hold the cluster's data.",
            min=0,
            max=YEAR,
        ),
        "min_job_age_secs": Key(
            int,
            300,
            "A finished job stays in the controllers' state (and in `squeue -t all`, `scontrol show job`) at "
            "least this long, like Slurm's MinJobAge. With accounting on, it stays until its final record is in "
            "the database, however long that takes.",
            min=1,
            max=YEAR,
        ),
        "min_free_disk_mb": Key(
            int,
            100,
            "While `state_dir` has less free space than this, the controller refuses writes with `UNAVAILABLE` "
            "and a line that names the directory and the free space, instead of running into a full disk "
            "half-way through a journal write. Writes resume by themselves once space is freed.",
            min=0,
            max=2**30,
        ),
    },
    "scheduler": {
        "enforce_part_limits": Key(
            str,
            "NO",
            "Slurm's EnforcePartLimits. `NO` queues a job over its partition's MaxTime, MaxNodes or node count; "
            "it pends (PartitionTimeLimit, PartitionNodeLimit) until the limit or the job changes. `ANY` and "
            "`ALL` refuse it at submit (a job names one partition, so they are the same here).",
            choices=("NO", "ANY", "ALL"),
        ),
        "preempt_type": Key(
            str,
            "none",
            "Slurm's PreemptType. `none` never preempts; `qos_priority` lets a pending job that does not fit stop "
            "running jobs whose QOS its own QOS lists in `preempt` and outranks by priority, as the victim's QOS "
            "`preempt_mode` (else its partition's `preempt_mode`) says ([controller.md](controller.md), "
            '"Preemption"). Applies on SIGHUP.',
            choices=("none", "qos_priority"),
        ),
        "priority_type": Key(
            str,
            "basic",
            "Slurm's PriorityType. `basic` orders the queue by submission (lowered by `--nice`), as "
            "priority/basic; `multifactor` gives each pending job the sum of the weighted factors below, "
            'recalculated every `priority_calc_period` (docs/controller.md "Priority").',
            choices=("basic", "multifactor"),
        ),
        "priority_weight_age": Key(
            int,
            0,
            "Slurm's PriorityWeightAge: what the age factor "
            "(how long a job has been eligible, up to `priority_max_age`) adds at most to a multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_weight_fairshare": Key(
            int,
            0,
            "Slurm's PriorityWeightFairshare: what the fair-share factor "
            "(how little the job's association has used against its shares) adds at most to a multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_weight_job_size": Key(
            int,
            0,
            "Slurm's PriorityWeightJobSize: what the job-size factor "
            "(the job's nodes and CPUs against the cluster's; see `priority_favor_small`) adds at most to a "
            "multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_weight_partition": Key(
            int,
            0,
            "Slurm's PriorityWeightPartition: what the partition factor "
            "(its `priority_job_factor` against the highest) adds at most to a multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_weight_qos": Key(
            int,
            0,
            "Slurm's PriorityWeightQOS: what the QOS factor (its priority against the highest QOS priority) "
            "adds at most to a multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_weight_assoc": Key(
            int,
            0,
            "Slurm's PriorityWeightAssoc: what the association factor "
            "(its priority against the highest association priority) adds at most to a multifactor priority.",
            min=0,
            max=2**32 - 1,
        ),
        "priority_max_age": Key(
            str,
            "7-0",
            "Slurm's PriorityMaxAge: a job eligible this long has the full age factor.",
            time_limit=True,
        ),
        "priority_decay_half_life": Key(
            str,
            "7-0",
            "Slurm's PriorityDecayHalfLife: recorded usage halves over this long; `0` never decays it.",
            time_limit=True,
        ),
        "priority_calc_period": Key(
            str,
            "5",
            "Slurm's PriorityCalcPeriod: how often the leader recalculates the pending jobs' priorities "
            "(minutes, or a time limit's other forms; at least one second).",
            time_limit=True,
        ),
        "priority_favor_small": Key(
            bool,
            False,
            "Slurm's PriorityFavorSmall: the job-size factor favours small jobs (1 for one CPU) instead of large.",
        ),
    },
    "agent": {
        "node_name": Key(
            str,
            "",
            "The node's name in `sinfo` and `scontrol`.",
            pattern=_NODE,
            pattern_text="letters, digits, `-`, `_` and `.`, starting with a letter or digit",
            shown_default="short host name",
        ),
        "listen_addr": Key(
            str,
            f"0.0.0.0:{AGENT_GRPC_PORT}",
            'The agent\'s gRPC address. With `[auth] type = "none"` it must be a loopback address unless '
            "`[auth] allow_unauthenticated_network = true`.",
            port=AGENT_GRPC_PORT,
        ),
        "advertise_addr": Key(
            str,
            "",
            "The address controllers use to reach the agent, when it differs from `listen_addr`.",
            port=AGENT_GRPC_PORT,
            shown_default="`listen_addr`",
        ),
        "probe_addr": Key(str, "127.0.0.1:6823", "HTTP probes: `/status`, `/livez`, `/readyz`.", port=None),
        "state_dir": Key(str, "/var/lib/spur/agent", "Supervisor session directories, one per job attempt.", path=True),
        "heartbeat_interval_secs": Key(
            float,
            5.0,
            "How often the agent reports to the leader. At least three heartbeats must fit in "
            "`[controller] heartbeat_timeout_secs`.",
            above=0,
            max=HOUR,
        ),
        "cpus": Key(int, 0, "CPUs offered to jobs; `0` offers every online CPU.", min=0, max=2**20),
        "memory_mb": Key(int, 0, "Memory offered to jobs in MiB; `0` offers the physical memory.", min=0, max=2**40),
        "partition": Key(
            str,
            "default",
            "The partition this node belongs to when no `[partitions.NAME]` table names the node; a node that a "
            'table names is in the partitions of the tables ([controller.md](controller.md), "Partitions").',
            pattern=_NAME,
            pattern_text="letters, digits, `-` and `_`",
        ),
        "gres": Key(
            str,
            "",
            "Counted resources this node offers to `--gres` and `--gpus*`, as `NAME[:TYPE]=COUNT` entries joined "
            "by commas, like `gpu=2,nic=1` or `gpu:a100=4`; a job asking for `gpu` takes typed ones too.",
            pattern=rf"{_GRES_ENTRY}(,{_GRES_ENTRY}){{0,{MAX_GRES_KINDS - 1}}}",
            pattern_text=f"NAME[:TYPE]=COUNT entries joined by commas (at most {MAX_GRES_KINDS}), like gpu=2,nic=1",
            shown_default="empty (none)",
        ),
        "features": Key(
            list,
            [],
            f'Node features `--constraint` matches, like `["ssd", "avx2"]` (at most {MAX_FEATURES}).',
            pattern=_FEATURE,
            pattern_text="letters, digits, `_`, `.`, `:`, `=` and `-` (1 to 64 characters)",
        ),
        "stepd_path": Key(
            str,
            "",
            "The `spurstepd` executable to start for each job; when set, it must be an executable file.",
            path=True,
            shown_default="next to `spurd`",
        ),
        "launch_timeout_secs": Key(
            float,
            10.0,
            "How long a supervisor may take to start a job before the launch counts as failed.",
            above=0,
            max=HOUR,
        ),
        "kill_wait_secs": Key(
            float,
            5.0,
            "When a job is cancelled or runs out of time, the time between SIGTERM and SIGKILL (Slurm's KillWait).",
            min=0,
            max=HOUR,
        ),
        "gres_files": Key(
            list,
            [],
            "The device file of each unit of a `gres` resource, as `NAME[:TYPE]=PATH` entries in index order, "
            'like `["gpu=/dev/nvidia0", "gpu=/dev/nvidia1"]`. A resource listed here needs one file per unit; '
            "a job is allowed only the files of the units it was given (`[cgroup] constrain_devices`).",
            pattern=rf"{_GRES_NAME}(:{_GRES_NAME})?=/.{{1,4000}}",
            pattern_text="NAME[:TYPE]=/absolute/path",
            shown_default="empty (no device files)",
        ),
    },
    "cgroup": {
        "constrain_cores": Key(
            bool, True, "Confine each job to the CPUs the controller gave it on the node (`cpuset.cpus`)."
        ),
        "constrain_ram_space": Key(
            bool,
            True,
            "Cap each job's memory at what it was allocated (`--mem`, `--mem-per-cpu` times its CPUs there), "
            "scaled by `allowed_ram_percent`; a job over it is killed and ends `OUT_OF_MEMORY`. Jobs that asked "
            "for no memory are not capped.",
        ),
        "allowed_ram_percent": Key(
            float,
            100.0,
            "The memory cap as a percentage of the allocation; `125` gives jobs a quarter more as headroom.",
            min=1,
            max=10000,
        ),
        "constrain_swap": Key(
            bool,
            False,
            "Also cap memory plus swap at the same value, so a job cannot spill its overrun into swap.",
        ),
        "oom_kill_job": Key(
            bool,
            True,
            "When the OOM killer kills any process of a job, end the whole job (`OUT_OF_MEMORY`), not only "
            "that process.",
        ),
        "cpu_quota": Key(
            bool,
            False,
            "Also give each job a CFS quota of its CPU count (`cpu.max`, `cpu.cfs_quota_us`); off by default "
            "because the cpuset is the bound, as in Slurm.",
        ),
        "constrain_devices": Key(
            bool,
            True,
            "Deny every device node to a job but the base pseudo-devices, the host-infrastructure set, its "
            "allocated `gres_files` and `extra_device_paths`.",
        ),
        "extra_device_paths": Key(
            list,
            [],
            'Device files every job may open besides the built-in set, like `["/dev/nvidiactl"]`.',
            path=True,
        ),
        "required": Key(
            bool,
            False,
            "Refuse a launch whose limits or device filter cannot be installed on this host (the job is "
            "requeued) instead of running it with less enforcement.",
        ),
    },
    "accounting": {
        "database_url": Key(
            str,
            "",
            "PostgreSQL URL without a password, such as `postgresql://spur@db1/spur`.",
            shown_default="empty (off)",
        ),
        "password_file": Key(
            str,
            "",
            "A file (mode 0600) that holds the database password. The password never appears in `spur.conf`, "
            "in logs or in process arguments.",
            path=True,
            shown_default="empty",
        ),
        "enforce": Key(
            list,
            [],
            "Slurm's AccountingStorageEnforce: what a job is checked against in the association store (`sacctmgr`). "
            "`associations`: a job's user, account and partition must have an association (else sbatch is refused "
            "with Slurm's `Invalid account or account/partition combination specified`); `limits`: the "
            "associations' and QOS' limits hold jobs back or refuse them (implies `associations`); `qos`: a job may "
            "only use a QOS its association lists (`Invalid qos specification`; implies `associations`); `safe`: "
            "a job starts only when it can finish within its Grp limits (implies `limits`). Empty: every job runs, "
            "with its user's default account and QOS filled in. The store exists from WAL level 5 on, with or "
            "without a database.",
            choices=ENFORCE_WORDS,
            shown_default="empty (nothing enforced)",
        ),
    },
    "auth": {
        "type": Key(
            str,
            "none",
            "`munge` on real clusters; `none` trusts what clients say about themselves and is meant for the "
            "local demo only (the daemons then listen on loopback only, see `allow_unauthenticated_network`).",
            choices=("none", "munge"),
        ),
        "admins": Key(
            list,
            ["root"],
            "Users (or `@group`) allowed to drain, resume and update nodes and to cancel other users' jobs.",
        ),
        "munge_socket": Key(
            str,
            DEFAULT_MUNGE_SOCKET,
            'The munged socket. With `type = "munge"`, spurctld and spurd refuse to start while it does not '
            "exist (start munged first).",
            path=True,
        ),
        "private_data": Key(
            list,
            [],
            "Slurm's PrivateData: what a user (AdminLevel None, see `sacctmgr`) sees of others. `jobs`: only their "
            "own jobs and steps (and those of the accounts they coordinate) in squeue, scontrol show job/step, sacct "
            "and sprio; another user's job is answered as one that does not exist, and `scancel -u OTHER` cancels "
            "nothing. `usage`: only their own associations in sshare and sacctmgr show assoc. Operators and "
            "administrators see everything. spurctld refuses a category it does not know; spurd and the commands "
            "ignore the key. Read at start only: restart every controller after changing it. A job's script and "
            "environment are shown only to its owner, operators and administrators, whatever this says.",
            shown_default="empty (everything visible, as Slurm)",
        ),
        "allow_unauthenticated_network": Key(
            bool,
            False,
            'With `type = "none"`, let spurctld and spurd listen (`listen_addr`) on an address other hosts '
            "can reach. Anyone who reaches the port can then act as any user, root included; the daemons log a "
            "WARNING at start. Use it only on a network that nobody else can reach; use `munge` everywhere else.",
        ),
    },
    "log": {
        "level": Key(
            str,
            "info",
            "`--log-level` on the command line wins.",
            choices=("debug", "info", "warning", "error"),
        ),
    },
    # Read by spurctld at start and by `spur version --check` / `spur self-update` (release/selfupdate.py).
    "update": {
        "index": Key(
            str,
            "",
            "The release index to compare with: a directory or an http(s) URL holding `index.json` "
            "(`spur-release publish`). `spur version --check` and `spur self-update` use it when given no "
            "`--index` (and no `$SPUR_RELEASE_INDEX`).",
            shown_default="empty (nothing is checked)",
        ),
        "check_on_startup": Key(
            bool,
            True,
            "spurctld asks `index` at start, in the background, whether `channel` lists a newer build than the "
            "one running, and logs one line when it does. Nothing is asked while `index` is empty.",
        ),
        "auto_update": Key(
            bool,
            False,
            "When the check at start finds a newer build, install it beside the running release as `spur "
            "self-update` does (its own `PREFIX/releases/<id>`, then `current` switched). Nothing is restarted: "
            "each daemon runs the new build from its next restart (for a cluster, restart through the rolling "
            "upgrade). spurd never installs anything.",
        ),
        "channel": Key(str, "stable", "The channel of the index to follow.", choices=("stable", "nightly")),
        "cache_dir": Key(
            str,
            "/var/cache/spur",
            "Where the check keeps the index it read: a copy younger than one hour is used instead of asking "
            "again, so a daemon that restarts often does not ask the index each time.",
            path=True,
        ),
    },
}


PARTITIONS = "partitions"  # [partitions.NAME]: one table per partition, keys from PARTITION_KEYS

# [partitions.NAME] -> key -> Key: a partition as Slurm's PartitionName line has it (docs/controller.md "Partitions").
PARTITION_KEYS: dict[str, Key] = {
    "nodes": Key(
        str,
        "",
        "Slurm's Nodes: the partition's nodes as a hostlist expression (`n[1-4],gpu1`), or `ALL` for every node "
        "that registers. A node may be in several partitions.",
        shown_default="empty (no nodes)",
    ),
    "default": Key(bool, False, "Default=YES: a job sent without `-p` runs here. At most one partition says so."),
    "max_time": Key(
        str,
        "UNLIMITED",
        "MaxTime: the longest time limit of a job here. A longer one is queued and pends (PartitionTimeLimit) "
        'under `[scheduler] enforce_part_limits = "NO"`.',
        time_limit=True,
    ),
    "default_time": Key(
        str,
        "",
        "DefaultTime: the time limit of a job sent without `-t`.",
        time_limit=True,
        shown_default="`max_time`",
    ),
    "max_nodes": Key(
        int,
        0,
        "MaxNodes: the most nodes one job may ask for; `0` or `UNLIMITED` for no limit.",
        min=0,
        max=1_000_000,
        unlimited=True,
    ),
    "min_nodes": Key(int, 0, "MinNodes: the fewest nodes one job may ask for.", min=0, max=1_000_000),
    "state": Key(
        str,
        "UP",
        "`UP`; `DOWN` queues jobs but starts none (PartitionDown); `DRAIN` refuses new jobs and runs the queued "
        "ones; `INACTIVE` refuses new jobs and starts none (PartitionInactive). Running jobs always go on.",
        choices=("UP", "DOWN", "DRAIN", "INACTIVE"),
    ),
    "hidden": Key(bool, False, "Hidden=YES: left out of `sinfo` and `squeue` listings unless `-a` / `--all`."),
    "priority_tier": Key(
        int,
        1,
        "PriorityTier: on nodes shared by several partitions, the jobs of the higher tier are planned first.",
        min=0,
        max=65533,
    ),
    "priority_job_factor": Key(
        int, 1, "PriorityJobFactor: recorded and shown (`scontrol show partition`).", min=0, max=65533
    ),
    "preempt_mode": Key(
        str,
        "off",
        "PreemptMode: what `qos_priority` preemption does to a job of this partition whose QOS sets no "
        "`preempt_mode`: `off` protects it, `cancel` ends it PREEMPTED, `requeue` puts it back in the queue.",
        choices=("off", "cancel", "requeue"),
    ),
}


# ------------------------------------------------------------------ the typed objects, derived from SCHEMA


def _section_class(section: str, keys: dict[str, Key]) -> type:
    fields = [
        (name, tuple[str, ...] if k.type is list else k.type, field(default=_stored(k, k.default)))
        for name, k in keys.items()
    ]
    cls = make_dataclass(f"{section.capitalize()}Config", fields, frozen=True)
    cls.__module__ = __name__
    return cls


def _stored(key: Key, value: Any) -> Any:
    """The value kept in a section object: lists become tuples (frozen), integers given for numbers floats."""
    if key.type is list:
        return tuple(value)
    if key.type is float:
        return float(value)
    return value


SECTION_TYPES: dict[str, type] = {section: _section_class(section, keys) for section, keys in SCHEMA.items()}

# One [partitions.NAME] table: its name, then the PARTITION_KEYS as written (times as text; see partition_limits).
PartitionConfig = make_dataclass(
    "PartitionConfig",
    [("name", str), *[(n, k.type, field(default=_stored(k, k.default))) for n, k in PARTITION_KEYS.items()]],
    frozen=True,
)
PartitionConfig.__module__ = __name__

# Config(path, cluster, controller, agent, accounting, auth, log, extra): `extra` keeps the sections the schema
# does not know, verbatim (site-local x- sections; the Ansible role carries them over).
Config = make_dataclass(
    "Config",
    [
        ("path", str, field(default="")),
        *[(section, cls, field(default_factory=cls)) for section, cls in SECTION_TYPES.items()],
        ("partitions", tuple, field(default=())),  # PartitionConfig per [partitions.NAME], in the file's order
        ("extra", dict, field(default_factory=dict)),
    ],
    frozen=True,
)
Config.__module__ = __name__


# ------------------------------------------------------------------ addresses (parsed by spur_hpc.model)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost: reachable from this host only (no name lookup: names are not trusted)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    return host in ("0.0.0.0", "::")


# ------------------------------------------------------------------ loading: keys, types and bounds


def _fail(section: str, key: str, problem: str, fix: str) -> ConfigError:
    where = f"[{section}] {key}" if key else f"[{section}]"
    return ConfigError(f"{where}: {problem}; {fix}")


def _type_names(key: Key) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list of strings", bool: "true or false"}
    return names[key.type]


def _convert(section: str, name: str, raw: Any, key: Key | None = None) -> Any:
    """A TOML value -> the stored value, or ConfigError when its type or bounds are wrong."""
    key = key or SCHEMA[section][name]
    if key.unlimited and isinstance(raw, str):
        if raw.strip().upper() in ("UNLIMITED", "INFINITE"):
            return 0
        raise _fail(section, name, f"bad value {_short(raw)}", f"use {key.accepts()}")
    accepted = {int: (int,), float: (int, float), str: (str,), list: (list,), bool: (bool,)}[key.type]
    if not isinstance(raw, accepted) or (isinstance(raw, bool) and key.type is not bool):
        got = "boolean" if isinstance(raw, bool) else type(raw).__name__
        problem = f"expected {_type_names(key)}, got {got} {_short(raw)}"
        raise _fail(section, name, problem, "write a value of that type")
    if key.type in (int, float):
        _check_number(section, name, key, raw)
    elif key.type is str:
        _check_text(section, name, key, raw)
    elif key.type is list:
        for item in raw:
            if not isinstance(item, str):
                problem = f"expected a list of strings, found {_short(item)}"
                raise _fail(section, name, problem, 'quote every item: ["a", "b"]')
            _check_text(section, name, key, item, item=True)
    return _stored(key, raw)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_number(section: str, name: str, key: Key, value: int | float) -> None:
    fix = f"use {key.accepts()} (the default is {_number(key.default)})"
    if isinstance(value, float) and math.isnan(value):
        raise _fail(section, name, "nan is not a number", fix)
    if isinstance(value, float) and math.isinf(value):
        raise _fail(section, name, f"{value} is not a finite number", fix)
    low_ok = (key.above is None or value > key.above) and (key.min is None or value >= key.min)
    if not low_ok or (key.max is not None and value > key.max):
        raise _fail(section, name, f"{_short(value)} is out of range", fix)


def _check_text(section: str, name: str, key: Key, value: str, item: bool = False) -> None:
    if "\x00" in value:
        raise _fail(section, name, f"{_short(value)} contains a NUL character", "remove it")
    if value == "" and key.optional and not item:
        return  # not set: derived at run time, or the feature is off
    if key.choices and value not in key.choices:
        raise _fail(section, name, f"unknown value {_short(value)}", f"use {key.accepts()}")
    if key.time_limit:
        try:
            parse_time_limit(value, "time")
        except InvalidValue:
            raise _fail(section, name, f"bad time limit {_short(value)}", f"use {TIME_LIMIT_FORMS}") from None
    if key.pattern and not re.fullmatch(key.pattern, value):
        raise _fail(section, name, f"bad value {_short(value)}", f"use {key.pattern_text}")
    if key.path:
        example = key.default or "/etc/spur/..."
        if not value:
            raise _fail(section, name, "empty", f"set an absolute path, like {example}")
        if not os.path.isabs(value):
            raise _fail(section, name, f"{_short(value)} is a relative path", f"use an absolute path, like {example}")
        if len(value.encode(errors="surrogatepass")) >= 4096:
            raise _fail(section, name, "the path is longer than 4095 bytes", "use a shorter path")
    if key.port != NOT_AN_ADDRESS:
        _addr(section, name, value, key.port)


def _addr(section: str, key: str, value: str, default_port: int | None = None) -> str:
    try:
        return normalize_addr(value, default_port)
    except ValueError as exc:
        raise _fail(
            section, key, f"bad address {_short(value)} ({exc})", "write host:port, like 127.0.1.1:6817"
        ) from None


def parse(text: str, path: str = "<string>") -> Config:
    """Parse TOML text into a Config, checking keys, types and bounds (not the rules between keys)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix the syntax at that line") from None
    except ValueError as exc:  # an integer of thousands of digits: Python refuses to convert it
        raise ConfigError(f"{path}: not valid TOML ({' '.join(str(exc).split())}); fix that value") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid TOML (nested too deeply); fix the file") from None
    sections: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    partitions: tuple = ()
    for section, body in data.items():
        if section == PARTITIONS:
            partitions = _partitions(body)
            continue
        if section not in SCHEMA:
            if section.startswith("x-") or section.startswith("x_"):
                extra[section] = body
                continue
            raise _fail(
                _short(section)[1:-1],
                "",
                "unknown section",
                f"known sections are {', '.join('[' + s + ']' for s in SCHEMA)} (site-local sections start with x-)",
            )
        if not isinstance(body, dict):
            fix = f"write it as [{section}] followed by keys"
            raise _fail(section, "", f"expected a table, got {_short(body)}", fix)
        values = {}
        for key, raw in body.items():
            if key not in SCHEMA[section]:
                known = ", ".join(SCHEMA[section])
                raise _fail(section, _short(key)[1:-1], "unknown key", f"remove it or use one of: {known}")
            values[key] = _convert(section, key, raw)
        sections[section] = values
    built = {section: cls(**sections.get(section, {})) for section, cls in SECTION_TYPES.items()}
    return Config(path=path, extra=extra, partitions=partitions, **built)


def _partitions(body: Any) -> tuple:
    """[partitions.NAME] tables -> PartitionConfig per table, in the file's order (keys, types, forms checked)."""
    if not isinstance(body, dict):
        raise _fail(PARTITIONS, "", f"expected tables, got {_short(body)}", "write one [partitions.NAME] table each")
    out = []
    for name, keys in body.items():
        where = f"{PARTITIONS}.{_short(name)[1:-1]}"
        if not re.fullmatch(_NAME, name):
            raise _fail(where, "", "bad partition name", "use letters, digits, `-` and `_` (at most 63)")
        if not isinstance(keys, dict):
            raise _fail(where, "", f"expected a table, got {_short(keys)}", f"write it as [{where}] followed by keys")
        values = {}
        for key, raw in keys.items():
            if key not in PARTITION_KEYS:
                known = ", ".join(PARTITION_KEYS)
                raise _fail(where, _short(key)[1:-1], "unknown key", f"remove it or use one of: {known}")
            if key == "state" and isinstance(raw, str):
                raw = raw.upper()  # Slurm reads State=up as UP
            values[key] = _convert(where, key, raw, PARTITION_KEYS[key])
        nodes = values.get("nodes", "")
        if nodes and nodes.upper() != "ALL":
            try:
                expand_hostlist(nodes)
            except InvalidValue as exc:
                raise ConfigError(f"[{where}] nodes: {exc}, or ALL") from None
        out.append(PartitionConfig(name=name, **values))
    return tuple(out)


def load(path: str | None = None, role: str | None = None) -> Config:
    """Read spur.conf from path (default $SPUR_CONF or /etc/spur/spur.conf) and validate it for role."""
    path = path or os.environ.get("SPUR_CONF") or DEFAULT_CONF_PATH
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found; create it (see docs/configuration.md) or pass --conf") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; point --conf or SPUR_CONF at the spur.conf file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}); check its permissions") from None
    conf = parse(decode(data, path), path)
    validate(conf, role)
    return conf


def decode(data: bytes, path: str) -> str:
    """spur.conf bytes -> text; TOML files are UTF-8, and the error says where the first bad byte is."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}, column {column}); "
            "save the file as UTF-8"
        ) from None


# ------------------------------------------------------------------ validation: rules between keys, per role


def validate(conf: Config, role: str | None) -> None:
    """Cross-key rules. role is 'controller', 'agent', 'client' or None (keys and types only)."""
    hosts = [_addr("controller", "hosts", h, CONTROLLER_GRPC_PORT) for h in conf.controller.hosts]
    if len(set(hosts)) != len(hosts):
        dup = next(h for h in hosts if hosts.count(h) > 1)
        raise _fail("controller", "hosts", f"{dup} is listed twice", "list every controller once")
    _validate_partitions(conf.partitions)
    _validate_priority(conf.scheduler)
    if role == "controller":
        _validate_controller(conf, hosts)
        _validate_exposure(conf, "controller")
    elif role == "agent":
        _validate_agent(conf)
        _validate_exposure(conf, "agent")
    elif role == "client" and not hosts:
        raise _fail("controller", "hosts", "empty", 'list the controllers, like hosts = ["ctl1:6817"]')


def _validate_priority(sch: Any) -> None:
    """priority/multifactor's periods: a recalculation period and a maximum age of at least one second."""
    for name in ("priority_calc_period", "priority_max_age"):
        if parse_time_limit(getattr(sch, name), name) < 1:
            problem = f"{getattr(sch, name)!r} is no period"
            raise _fail("scheduler", name, problem, "give at least one second, like 0:01")


def _validate_controller(conf: Config, hosts: list[str]) -> None:
    c = conf.controller
    if not c.raft_addr:
        raise _fail("controller", "raft_addr", "missing", "set it to this controller's host:port, like 127.0.1.1:6821")
    own = _addr("controller", "raft_addr", c.raft_addr, RAFT_PORT)
    if _is_wildcard(split_host_port(own)[0]):
        raise _fail("controller", "raft_addr", f"{c.raft_addr!r} is a wildcard", "use this controller's own address")
    if not c.peers:
        raise _fail("controller", "peers", "empty", f'list every controller\'s raft_addr, this one included: ["{own}"]')
    peers = [_addr("controller", "peers", p, RAFT_PORT) for p in c.peers]
    if len(set(peers)) != len(peers):
        dup = next(p for p in peers if peers.count(p) > 1)
        raise _fail("controller", "peers", f"{dup} is listed twice", "list every controller once")
    if own not in peers:
        raise _fail(
            "controller",
            "peers",
            f"does not contain this controller's raft_addr {own} (peers: {', '.join(peers)})",
            "add it, or fix raft_addr",
        )
    # Two peers are allowed: remove_controllers.yml passes through them (3 -> 2 -> 3 to replace a host) and a member
    # with data runs with the committed membership. Forming a new cluster of two is refused at the bootstrap.
    if len(peers) == 1:
        _validate_single_controller(c, hosts)
    if not c.election_timeout_min_ms < c.election_timeout_max_ms:
        raise _fail(
            "controller",
            "election_timeout_min_ms",
            f"{c.election_timeout_min_ms} must be below election_timeout_max_ms ({c.election_timeout_max_ms})",
            "use 300 and 800",
        )
    if c.election_timeout_min_ms <= 3 * c.append_entries_period_ms:
        raise _fail(
            "controller",
            "append_entries_period_ms",
            f"{c.append_entries_period_ms} must be under a third of election_timeout_min_ms",
            "use 50",
        )
    if c.leader_fallback_ms <= c.append_entries_period_ms:
        raise _fail(
            "controller",
            "leader_fallback_ms",
            f"{c.leader_fallback_ms} must be above append_entries_period_ms ({c.append_entries_period_ms}): a leader "
            "steps down when no majority answered within it, and followers answer its heartbeats",
            "use 1000",
        )
    if c.connection_retry_ms >= c.election_timeout_min_ms:
        raise _fail(
            "controller",
            "connection_retry_ms",
            f"{c.connection_retry_ms} must be below election_timeout_min_ms ({c.election_timeout_min_ms})",
            "use 250 (a slower reconnect makes a restarted member depose the leader)",
        )
    check_secret_file("controller", "raft_secret_file", c.raft_secret_file)
    validate_private_data(conf.auth.private_data)


def validate_private_data(categories: list[str]) -> None:
    """spurctld alone refuses a category it does not know: agents and the commands ignore the key, so a spur.conf
    naming a newer release's category still loads on them, but a controller must not show what it should hide."""
    for category in categories:
        if category not in PRIVATE_DATA_CATEGORIES:
            raise _fail(
                "auth",
                "private_data",
                f"unknown category {_short(category)}",
                f"use {' or '.join(repr(c) for c in PRIVATE_DATA_CATEGORIES)} (this release knows no other)",
            )


def _validate_partitions(partitions: tuple) -> None:
    """At most one default partition; each one's DefaultTime within its MaxTime, MinNodes within MaxNodes."""
    defaults = [p.name for p in partitions if p.default]
    if len(defaults) > 1:
        raise _fail(
            f"{PARTITIONS}.{defaults[1]}",
            "default",
            f"partition {defaults[0]} is the default already",
            "set default = true on one partition only",
        )
    for part in partitions:
        where = f"{PARTITIONS}.{part.name}"
        max_time = parse_time_limit(part.max_time, "max_time")
        default_time = parse_time_limit(part.default_time, "default_time") if part.default_time else max_time
        if max_time and (not default_time or default_time > max_time):
            raise _fail(
                where,
                "default_time",
                f"{part.default_time!r} is longer than max_time {part.max_time!r}",
                "shorten default_time or raise max_time",
            )
        if part.max_nodes and part.min_nodes > part.max_nodes:
            raise _fail(
                where,
                "min_nodes",
                f"{part.min_nodes} is above max_nodes {part.max_nodes}",
                "lower it or raise max_nodes",
            )


def _validate_single_controller(c: Any, hosts: list[str]) -> None:
    """A lone controller with an empty state asks every other host in `hosts` first: one that is not a
    controller never answers, and the start would wait for ever. Refuse what is clearly another host."""
    listen = _addr("controller", "listen_addr", c.listen_addr, CONTROLLER_GRPC_PORT)
    fix = f'list only this controller, hosts = ["{listen}"], or add the other controllers to peers'
    if len(hosts) > 1:
        raise _fail("controller", "hosts", f"lists {len(hosts)} controllers but peers lists only this one", fix)
    listen_host, listen_port = split_host_port(listen)
    for entry in hosts:
        host, port = split_host_port(entry)
        # A host name or a wildcard listen_addr may still be this controller: only literal mismatches are sure.
        other_ip = _is_ip(host) and _is_ip(listen_host) and not _is_wildcard(listen_host) and host != listen_host
        if port != listen_port or other_ip:
            raise _fail(
                "controller",
                "hosts",
                f"{entry} is not this controller ({listen}), and peers lists only this one, so the start would "
                f"wait for ever for {entry} to answer",
                fix,
            )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _validate_agent(conf: Config) -> None:
    a = conf.agent
    if not conf.controller.hosts:
        raise _fail("controller", "hosts", "empty", 'list the controllers the agent registers with: ["ctl1:6817"]')
    name = node_name(conf)
    if not re.fullmatch(SCHEMA["agent"]["node_name"].pattern, name):
        raise _fail(
            "agent",
            "node_name",
            f"the host name {name!r} is not a valid node name",
            f"set node_name to {SCHEMA['agent']['node_name'].pattern_text}",
        )
    if a.heartbeat_interval_secs * 3 > conf.controller.heartbeat_timeout_secs:
        raise _fail(
            "agent",
            "heartbeat_interval_secs",
            f"{a.heartbeat_interval_secs} s leaves fewer than 3 beats in heartbeat_timeout_secs "
            f"({conf.controller.heartbeat_timeout_secs})",
            "lower the interval or raise the timeout",
        )
    offer = parse_gres_offer(a.gres)
    if a.gres and len(offer) != len(a.gres.split(",")):
        raise _fail("agent", "gres", f"{a.gres!r} names a resource twice", "name each NAME[:TYPE] once")
    too_many = [key for key, count in offer.items() if count > MAX_GRES_COUNT]
    if too_many:
        raise _fail(
            "agent",
            "gres",
            f"{too_many[0]}={offer[too_many[0]]} is out of range",
            f"use a count from 0 to {MAX_GRES_COUNT}",
        )
    files = parse_gres_files(a.gres_files)
    for key, paths in files.items():
        if len(paths) != offer.get(key, 0):
            raise _fail(
                "agent",
                "gres_files",
                f"{len(paths)} files for {key}, but gres offers {offer.get(key, 0)}",
                f"list one file per unit of {key} in gres, in index order",
            )
    if len(a.features) > MAX_FEATURES:
        raise _fail("agent", "features", f"{len(a.features)} features", f"list at most {MAX_FEATURES}")
    if a.stepd_path and not (os.path.isfile(a.stepd_path) and os.access(a.stepd_path, os.X_OK)):
        problem = "does not exist" if not os.path.exists(a.stepd_path) else "is not an executable file"
        raise _fail(
            "agent",
            "stepd_path",
            f"{a.stepd_path} {problem}",
            "point it at the spurstepd of this release, or remove it to use the one next to spurd",
        )


def _validate_exposure(conf: Config, section: str) -> None:
    """A daemon that believes every caller (auth none) must not be reachable from other hosts by default."""
    if conf.auth.type == "munge":
        _check_munge_socket(conf.auth.munge_socket)
        return
    listen = getattr(conf, section).listen_addr
    host, _port = split_host_port(listen, CONTROLLER_GRPC_PORT)
    if is_loopback(host) or conf.auth.allow_unauthenticated_network:
        return
    raise _fail(
        section,
        "listen_addr",
        f'{listen} can be reached from other hosts, and [auth] type = "none" lets any caller act as any user',
        'use [auth] type = "munge", listen on a loopback address (127.0.0.1), or accept the risk with '
        "[auth] allow_unauthenticated_network = true",
    )


def _check_munge_socket(path: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(
            "auth",
            "munge_socket",
            f"{path} does not exist (munged is not running, or it uses another socket)",
            "start munged (systemctl start munge) or point munge_socket at its socket",
        ) from None
    except OSError as exc:
        raise _fail("auth", "munge_socket", f"{path}: {exc.strerror}", "check the path and its permissions") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise _fail("auth", "munge_socket", f"{path} is not a socket", "point munge_socket at munged's socket")


def startup_warnings(conf: Config, role: str | None) -> list[str]:
    """Lines a daemon logs as WARNING at start: risks the configuration accepts on purpose."""
    if role not in ("controller", "agent") or conf.auth.type != "none" or not conf.auth.allow_unauthenticated_network:
        return []
    listen = getattr(conf, role).listen_addr
    if is_loopback(split_host_port(listen, CONTROLLER_GRPC_PORT)[0]):
        return []
    return [
        f"[auth] allow_unauthenticated_network = true: listening on {listen} without authentication; anyone "
        'who reaches this port can act as any user, root included (use [auth] type = "munge")'
    ]


def check_secret_file(section: str, key: str, path: str) -> None:
    """A secret file must exist, be a regular file, and not be readable by group or others."""
    if not path:
        raise _fail(section, key, "empty", "point it at a file with mode 0600")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise _fail(section, key, f"{path} does not exist", "create it with a random secret and mode 0600") from None
    except OSError as exc:
        raise _fail(section, key, f"{path}: {exc.strerror}", "check the path and its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise _fail(section, key, f"{path} is not a regular file", "point it at a file with mode 0600")
    if st.st_mode & 0o077:
        raise _fail(section, key, f"{path} has mode {stat.S_IMODE(st.st_mode):04o}", f"run: chmod 0600 {path}")


def read_secret(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            secret = decode(fh.read(), path).strip()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror}); check its permissions") from None
    if not secret:
        raise ConfigError(f"{path}: the secret file is empty; write a random secret into it")
    return secret


def node_name(conf: Config) -> str:
    return conf.agent.node_name or socket.gethostname().split(".")[0]
