"""The session captured from Debian's Slurm 22.05 (tests/golden/slurm-22.05, by tools/slurm_capture) replayed on a
Spur cluster of the same shape: the same node names, partitions, CPUs and memory, accounting in PostgreSQL.

Each capture's exit code, stdout and stderr are compared byte for byte after tools/slurm_capture/normalise.py.
tests/golden/slurm-22.05/differences.toml lists every capture still different, each with its reason; the test
fails on a difference not listed there, and on a listed capture that has become identical (so the list
cannot go stale). SPUR_REPLAY_DUMP=DIR writes both sides of every capture there, normalised, for reading.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tomllib
from pathlib import Path

import pytest

import pg
from agents import AgentProc
from harness import BIN

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tools.slurm_capture
from tools.slurm_capture import session  # noqa: E402
from tools.slurm_capture.normalise import Context, normalise  # noqa: E402
from tools.slurm_capture.runner import Side, run_session  # noqa: E402

from spur_hpc import __version__ as spur_version  # noqa: E402

pytestmark = pytest.mark.slow

pg_server, pg_database = pg.pg_server, pg.pg_database  # fixtures, bound by name

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm-22.05"


def load_captures() -> tuple[dict, dict[str, dict]]:
    meta = json.loads((GOLDEN / "session.json").read_text())
    captures = {p.stem: json.loads(p.read_text()) for p in sorted(GOLDEN.glob("[0-9][0-9][0-9]-*.json"))}
    return meta, captures


def load_differences() -> tuple[dict[str, str], dict[str, str]]:
    """[different]: captures Spur prints differently; [varies]: captures whose Spur output changes from run to run
    (compared, but neither required to differ nor to agree)."""
    listed = tomllib.loads((GOLDEN / "differences.toml").read_text())
    return listed.get("different", {}), listed.get("varies", {})


def shown(result: dict, ctx: Context) -> str:
    """One capture as compared: exit code, stdout, stderr, normalised."""
    return (
        f"rc={result['rc']}\n--- stdout\n{normalise(result['stdout'], ctx)}--- stderr\n"
        f"{normalise(result['stderr'], ctx)}"
    )


def test_the_committed_captures_are_the_current_session() -> None:
    meta, captures = load_captures()
    assert list(captures) == session.capture_names(), (
        "tools/slurm_capture/session.py changed since the capture: run it again "
        "(.venv/bin/python -m tools.slurm_capture capture)"
    )
    assert meta["captures"] == len(captures) >= 120
    different, varies = load_differences()
    assert not set(different) & set(varies), "a capture is in both [different] and [varies]"
    for name, reason in {**different, **varies}.items():
        assert name in captures, f"differences.toml names {name}, which is no capture"
        assert reason.strip(), f"differences.toml gives no reason for {name}"


# Slurm's PartitionName keys (session.PARTITION_LIMITS) -> spur.conf's [partitions.NAME] keys
SLURM_PARTITION_KEYS = {"MaxTime": "max_time", "DefaultTime": "default_time", "State": "state"}


def partition_tables() -> str:
    """[partitions.NAME] tables saying what the Slurm side's PartitionName lines say (derived from session.py's
    PARTITIONS, DEFAULT_PARTITION and PARTITION_LIMITS, the source of tools/slurm_capture's slurm.conf)."""
    tables = []
    for part, nodes in session.PARTITIONS.items():
        lines = [f"[partitions.{part}]", f'nodes = "{",".join(nodes)}"']
        if part == session.DEFAULT_PARTITION:
            lines.append("default = true")
        for item in session.PARTITION_LIMITS[part].split():
            key, _eq, value = item.partition("=")
            lines.append(f'{SLURM_PARTITION_KEYS[key]} = "{value}"')
        tables.append("\n".join(lines) + "\n")
    return "".join(tables)


@pytest.fixture
def spur_side(make_cluster, tmp_path: Path, pg_database, pg_server):
    extra = f'[accounting]\ndatabase_url = "{pg_database.url}"\npassword_file = "{pg_server.password_file}"\n'
    extra += partition_tables()
    cluster = make_cluster(1, name=session.CLUSTER, extra_sections=extra)
    agents = []
    for part, nodes in session.PARTITIONS.items():
        for node in nodes:
            in_part = f'partition = "{part}"'
            # every node on 127.0.0.1 with a port of its own, as the Slurm peer's NodeAddr=127.0.0.1 Port=...
            agent = AgentProc(
                tmp_path / node, cluster.hosts, name=node, cpus=session.CPUS, extra=in_part, ip=session.NODE_ADDR
            )
            agents.append(agent.start())
    work = tmp_path / "work"
    work.mkdir()
    for name, text in session.FILES.items():
        (work / name).write_text(text)
        (work / name).chmod(0o755)
    env = dict(os.environ, SPUR_CONF=str(cluster.client_conf()))
    for name in [k for k in env if k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))]:
        del env[name]
    env.pop("SPUR_CONTROLLER_ADDR", None)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"  # the job's srun is Spur's
    yield Side(BIN, env, work), tmp_path
    for agent in agents:
        agent.stop()


RUNTIME_WRAPPER = """#!{python}
import sys

from spur_hpc.cli import controller, slurm

controller.LARGE_REPLY_BYTES = -1  # every answer decoded by the protobuf runtime, not protocodec
sys.exit(slurm.{name}_main())
"""


def runtime_decoder_side(side: Side, bin_dir: Path) -> Side:
    """Spur's commands with every answer decoded by the protobuf runtime (the path of large answers)."""
    bin_dir.mkdir()
    for name in ("squeue", "sinfo", "sacct", "scontrol"):
        (bin_dir / name).write_text(RUNTIME_WRAPPER.format(python=sys.executable, name=name))
        (bin_dir / name).chmod(0o755)
    return Side(bin_dir, side.env, side.work, jobs=side.jobs)


# The session's -t 1 job: Slurm's captures from its submission to the wait for its TIMEOUT show it running, as
# Slurm's session got through them well within the minute. A loaded machine's replay can take longer, and then
# the job has rightly timed out on Spur.
TIME_LIMITED = ("sbatch-timeout", "tmo", 60.0, "scontrol-show-job-timeout")


def capture_named(names, suffix: str) -> str:
    (name,) = [n for n in names if n[4:] == suffix]
    return name


def timed_out_meanwhile(results: dict[str, dict]) -> set[str]:
    """The captures the replay ran more than the -t 1 job's limit after submitting it, before waiting for its end."""
    submit, _, limit, end = TIME_LIMITED
    first, last = capture_named(results, submit), capture_named(results, end)
    since = results[first]["secs"]
    return {n for n, r in results.items() if first < n < last and r["secs"] - since >= limit - 5}


def without_job(text: str, job_id: int, name: str) -> str:
    """text without the lines of one job (its id first, as squeue and sacct print it, or its name)."""
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if line.replace("|", " ").split()[:1] != [str(job_id)] and f" {name} " not in f" {line} "
    ]
    return "".join(kept)


def test_every_capture_of_slurm_replays_on_spur_as_listed(spur_side) -> None:
    side, scratch = spur_side
    meta, captures = load_captures()
    listed, varies = load_differences()
    twin = runtime_decoder_side(side, scratch / "runtime-bin")
    twin_ctx = Context(paths={str(side.work): "/WORK", str(scratch): "/SCRATCH", f"{twin.bin_dir}/": ""})
    decoders_differ = []

    def same_from_both_decoders(result: dict) -> None:
        def pair() -> tuple[str, str]:
            again = side.run(result["cmd"])
            other = twin.run(result["cmd"])
            return tuple(  # type: ignore[return-value]
                f"{p.returncode}\n{normalise(p.stdout.decode(errors='replace'), twin_ctx)}"
                f"{normalise(p.stderr.decode(errors='replace'), twin_ctx)}".replace(f"{BIN}/", "")
                for p in (again, other)
            )

        first, runtime = pair()
        if first != runtime:
            first, runtime = pair()  # a job may have changed state between the two calls: ask once more
        if first != runtime:
            decoders_differ.append(f"{result['capture']}:\nprotocodec:\n{first}\nruntime:\n{runtime}")

    def patience(step: session.Wait) -> float:
        # Spur gets a few times what Slurm needed, so that a state Spur never reaches costs little.
        took = meta["wait_secs"].get(step.what)
        return step.timeout if took is None else min(step.timeout, max(10.0, 1.5 * took + 10))

    results = {r["capture"]: r for r in run_session(side, patience, strict=False, after_read=same_from_both_decoders)}
    slurm_ctx = Context(
        paths={meta["work"]: "/WORK", meta["scratch"]: "/SCRATCH", "/usr/bin/": ""},
        hostname=meta["hostname"],
        kernel=meta["kernel"],
        versions=[meta["slurm_version"]],
    )
    spur_ids = {
        side.jobs[name]: slurm_id
        for name, slurm_id in meta["jobs"].items()
        if slurm_id is not None and side.jobs.get(name) is not None
    }
    spur_ctx = Context(
        paths={str(side.work): "/WORK", str(scratch): "/SCRATCH", f"{BIN}/": ""},
        hostname=socket.gethostname(),
        kernel=f"{os.uname().release} {os.uname().version}",
        versions=[spur_version],
        job_ids=spur_ids,
    )
    different, late = [], []
    timed_out = timed_out_meanwhile(results)
    slurm_tmo = meta["jobs"][TIME_LIMITED[1]]
    for name, capture in captures.items():
        expected, got = shown(capture, slurm_ctx), shown(results[name], spur_ctx)
        if expected != got and name in timed_out and (
            without_job(expected, slurm_tmo, TIME_LIMITED[1]) == without_job(got, slurm_tmo, TIME_LIMITED[1])
        ):
            late.append(name)  # the -t 1 job alone differs, and its minute had passed: compared, not required
        elif expected != got:
            different.append(name)
        dump = os.environ.get("SPUR_REPLAY_DUMP")
        if dump:
            Path(dump).mkdir(parents=True, exist_ok=True)
            Path(dump, f"{name}.txt").write_text(
                f"$ {capture['resolved']}\n===== slurm\n{expected}===== spur ({results[name]['resolved']})\n{got}",
                errors="surrogateescape",
            )
    unlisted = [n for n in different if n not in listed and n not in varies]
    stale = [n for n in listed if n not in different and n not in late]
    print(f"{len(captures)} captures, {len(captures) - len(different)} identical, {len(different)} different")
    if late:
        print(f"the -t 1 job had timed out on Spur when these ran (a slow replay): {', '.join(late)}")
    print("\n".join(side.log))  # the waits Spur never satisfied
    problems = []
    if unlisted:
        names = ", ".join(unlisted)
        problems.append(f"{len(unlisted)} captures differ from Slurm and are not in differences.toml: {names}")
    if stale:
        problems.append(f"now identical to Slurm: remove them from differences.toml: {', '.join(stale)}")
    if decoders_differ:
        problems.append("Spur's two decoders disagree:\n" + "\n".join(decoders_differ))
    assert not problems, "\n".join(problems + side.log)
