"""100 agents upgraded in place while each runs a job: the wall time of the rolling upgrade, and jobs lost.

The cluster: inventory/local.yml's settings with 3 controllers ($net.1-3) and --agents agents ($net.11 on,
127.0.4.N here), each agent a host alias with its own tree and its own supervisord, as in the embedded default.
What differs from local.yml, so that one 2-core machine can hold 100 hosts:
- the agents share one install prefix (as agents sharing /opt/spur over NFS do): a release is installed once
  for all of them; each agent's spurd is still restarted by its own turn of the playbook;
- each agent offers 1 CPU and 256 MB, and Ansible runs --forks hosts at a time.

Steps, with the real playbooks: releases A and B (bench/upgrade.py's, reused while the tree does not change);
deploy A; one job per node (1 CPU, runs until its flag file appears); rolling_upgrade to B with
spur_in_place_upgrade=true in batches of --batch; then every job must still run under the supervisor it had
before, on a node whose agent reports B; the flags are set and every job must end COMPLETED with exit code 0.
A job is lost when it is neither running under its supervisor after the upgrade nor COMPLETED at the end.
Teardown (with spur_wipe_state) always runs.

Usage: python bench/upgrade_many.py [--agents 100] [--batch 25] [--forks 25] [--net 127.0.4]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

# isort: off
import common  # first: it puts tests/ on sys.path
# isort: on

import grpc
import yaml

import upgrade
from spur_hpc.proto import slurm_pb2, slurm_pb2_grpc

TARGET_WALL_S = 240.0  # issue 19: 100 agents in place, batches of 25


def write_inventory(path: Path, net: str, agents: int) -> None:
    base = yaml.safe_load(upgrade.INVENTORY.read_text())
    all_vars = dict(base["all"]["vars"])
    all_vars.update(spur_agent_cpus=1, spur_agent_memory_mb=256)
    agent_vars = {"spur_install_prefix": "{{ spur_local_root }}/shared-agents/opt/spur"}
    inventory = {
        "all": {
            "vars": all_vars,
            "children": {
                "spur_controllers": {"hosts": {f"ctl-{i}": {"spur_host_address": f"{net}.{i + 1}"} for i in range(3)}},
                "spur_agents": {
                    "vars": agent_vars,
                    "hosts": {f"node-{i:03d}": {"spur_host_address": f"{net}.{11 + i}"} for i in range(agents)},
                },
                "spur_accounting": {},
                "spur_login": {},
            },
        }
    }
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))


class Cluster:
    """gRPC to whichever controller leads."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    def call(self, method: str, request, timeout: float = 10.0):
        last = None
        for _ in range(3):
            for address in self.addresses:
                with grpc.insecure_channel(address) as channel:
                    try:
                        return getattr(slurm_pb2_grpc.SlurmControllerStub(channel), method)(request, timeout=timeout)
                    except grpc.RpcError as exc:
                        last = exc
            time.sleep(1.0)
        raise SystemExit(f"{method}: no controller answered: {last}")

    def jobs(self) -> dict[int, slurm_pb2.Job]:
        reply = self.call("ListJobs", slurm_pb2.ListJobsRequest(include_finished=True))
        return {j.job_id: j for j in reply.jobs}


def agent_jobs(net: str, agents: int) -> dict[int, tuple[str, int, str]]:
    """{job id: (node, supervisor pid, agent version)} from every agent's /status."""
    found = {}
    for i in range(agents):
        url = f"http://{net}.{11 + i}:6823/status"
        try:
            with upgrade.urllib.request.urlopen(url, timeout=5) as reply:
                status = json.loads(reply.read())
        except (OSError, ValueError):
            continue
        for job in status.get("running_jobs", []):
            found[int(job["job_id"])] = (
                status.get("node", f"node-{i:03d}"),
                int(job["supervisor_pid"]),
                status.get("version", ""),
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--batch", type=int, default=25, help="spur_rolling_batch_size")
    parser.add_argument("--forks", type=int, default=25, help="Ansible forks")
    parser.add_argument("--net", default="127.0.4", help="loopback block of this run")
    opts = parser.parse_args()
    if not 1 <= opts.agents <= 240:
        raise SystemExit(f"--agents {opts.agents}: give 1 to 240 (one /24 of loopback addresses from .11)")

    releases, build_s = upgrade.build_releases()
    root = Path(tempfile.mkdtemp(prefix="sum-", dir="/tmp"))
    inventory = root / "hosts.yml"
    write_inventory(inventory, opts.net, opts.agents)
    pb = upgrade.Playbooks(root, opts.net, inventory)
    pb.env["ANSIBLE_FORKS"] = str(opts.forks)
    cluster = Cluster([f"{opts.net}.{i}:6817" for i in (1, 2, 3)])
    flags = root / "flags"
    flags.mkdir()
    result: dict = {
        "agents": opts.agents,
        "batch": opts.batch,
        "forks": opts.forks,
        "net": opts.net,
        "release_build_s": round(build_s, 1),
    }
    errors: list[str] = []
    kept = None
    try:
        code, deploy_s, _ = pb.run(
            "deploy",
            "-e",
            f"spur_release_src={releases['A']}",
            "-e",
            json.dumps(upgrade.KEEP_FINISHED),
            label="deploy-A",
            timeout=3600,
        )
        result["deploy_s"] = round(deploy_s, 1)
        if code != 0:
            raise SystemExit("the deploy of release A failed: nothing measured")
        job_ids = []
        for i in range(opts.agents):
            flag = flags / f"j{i}"
            spec = slurm_pb2.JobSpec(
                name=f"many-{i}",
                user="root",
                work_dir=str(root),
                cpus_per_task=1,
                script=f"#!/bin/sh\nwhile [ ! -e {flag} ]; do sleep 1; done\nexit 0\n",
                stdout_path="/dev/null",
                stderr_path="/dev/null",
            )
            job_ids.append(cluster.call("SubmitJob", slurm_pb2.SubmitJobRequest(spec=spec)).job_id)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            before = agent_jobs(opts.net, opts.agents)
            if all(j in before for j in job_ids):
                break
            time.sleep(2)
        upgrade.say(f"{len(before)} of {len(job_ids)} jobs run on their agents before the upgrade")
        result["jobs_running_before"] = len([j for j in job_ids if j in before])

        event_log = root / "in-place-events.json"
        code, wall, log = pb.run(
            "rolling_upgrade",
            "-e",
            f"spur_release_src={releases['B']}",
            "-e",
            "spur_in_place_upgrade=true",
            "-e",
            f"spur_rolling_batch_size={opts.batch}",
            "-e",
            f"spur_upgrade_event_log={event_log}",
            "-e",
            "spur_upgrade_verify_timeout=10",
            label="in-place-A-to-B",
            timeout=5400,
        )
        result.update(upgrade_exit=code, upgrade_wall_s=round(wall, 1), slowest_tasks=upgrade.slowest_tasks(log))
        if event_log.exists():
            result["events"] = upgrade.event_summary(event_log)
            result["events"].pop("hosts", None)
        after = agent_jobs(opts.net, opts.agents)
        kept_jobs = [j for j in job_ids if j in before and after.get(j, (None, None))[:2] == before[j][:2]]
        on_b = [j for j in kept_jobs if after[j][2] == upgrade.VERSIONS["B"]]
        result.update(jobs_kept_supervisor=len(kept_jobs), jobs_on_upgraded_agent=len(on_b))
        for i in range(opts.agents):
            (flags / f"j{i}").touch()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            states = {j: slurm_pb2.JobState.Name(job.state) for j, job in cluster.jobs().items() if j in job_ids}
            if all(s not in ("PENDING", "RUNNING") for s in states.values()):
                break
            time.sleep(2)
        final = cluster.jobs()
        completed = [
            j
            for j in job_ids
            if j in final and slurm_pb2.JobState.Name(final[j].state) == "COMPLETED" and final[j].exit_code == 0
        ]
        lost = [j for j in job_ids if j not in completed]
        result.update(jobs=len(job_ids), jobs_completed=len(completed), jobs_lost=len(lost), lost_ids=lost[:20])
    except (Exception, SystemExit) as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        upgrade.say(errors[-1])
    finally:
        code, teardown_s, _ = pb.run("teardown", "-e", "spur_wipe_state=true", label="teardown", timeout=3600)
        result["teardown_s"] = round(teardown_s, 1)
        if code != 0:
            errors.append(f"teardown exited {code}")
        left = upgrade.sweep(root)
        if left:
            upgrade.say(f"killed {len(left)} leftover process(es) of this run")
        kept = upgrade.keep_logs(root)
        shutil.rmtree(root, ignore_errors=True)
    result["errors"] = errors
    result["playbook_logs"] = str(kept) if kept is not None else None
    wall = result.get("upgrade_wall_s")
    checks = [
        common.check("upgrade wall", wall, "<=", TARGET_WALL_S, "s", missing="no upgrade ran"),
        common.check("jobs lost", result.get("jobs_lost"), "<=", 0, "jobs", missing="not counted"),
    ]
    result["rows"] = [
        common.row(
            "upgrade_many",
            f"{opts.agents} agents upgraded in place with jobs running",
            checks,
            detail=f"batches of {opts.batch}, {opts.forks} forks",
        )
    ]
    path = common.record("upgrade_many", result)
    common.print_rows(result["rows"])
    print(f"-> {path}")


if __name__ == "__main__":
    main()
