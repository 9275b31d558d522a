"""Every command line the three clients send, one after another against one cluster, checked by its answer
and its effect; the failure lists every line Spur refused or answered wrongly, not only the first.

The job scripts are the clients' own (submitit's _make_sbatch_string, dask-jobqueue's job_script()), made
by the clients' venv with a harmless command in place of the Python call; snakemake-executor-plugin-slurm
2.8.0 builds its command lines as strings run by a shell, and they are written here as it writes them.
The whole-client tests (test_submitit.py, test_dask_jobqueue.py, test_snakemake.py) run the same lines in
context; this one says which line breaks them.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from datetime import datetime, timedelta

import pytest

pytestmark = pytest.mark.slow

MAKE_SCRIPTS = r"""
import json, sys
from dask_jobqueue import SLURMCluster
from submitit.slurm.slurm import _make_sbatch_string

folder = sys.argv[1]
single = _make_sbatch_string(command="echo submitit-ok", folder=folder, time=5)
array = _make_sbatch_string(command="echo task-$SLURM_ARRAY_TASK_ID", folder=folder, time=5, map_count=4)
cluster = SLURMCluster(cores=1, memory="1GB", processes=1, walltime="00:10:00", log_directory=folder,
                       scheduler_options={"host": "127.0.0.1"})
dask = "\n".join("sleep 300" if line.startswith(sys.executable) else line for line in cluster.job_script().split("\n"))
cluster.close()
print(json.dumps({"submitit": single, "submitit-array": array, "dask": dask}))
"""
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "DEADLINE")
RUN_NAME = "0c2f9a3e-5d1b-4e43-9a57-6f3d2b1c8e70"  # snakemake names every job of a run by the run's UUID


class Checker:
    def __init__(self, site) -> None:
        self.site = site
        self.problems: list[str] = []

    def run(self, client: str, line: str, expect=None, stdin: str | None = None, retry: float = 0):
        """Run line through a shell as the client does; expect(stdout) returns what is wrong, or None. With
        retry, an answer that is not right yet is asked again until then (the clients poll: accounting may
        lag the job by a few seconds), and only the last answer counts."""
        deadline = time.monotonic() + retry
        while True:
            done = subprocess.run(["bash", "-c", line], cwd=self.site.work, env=self.site.env, input=stdin,
                                  capture_output=True, text=True, timeout=120)  # fmt: skip
            problem = f"exit {done.returncode}: {done.stderr.strip()}" if done.returncode != 0 else None
            if problem is None and expect is not None:
                problem = expect(done.stdout)
            if problem is None or time.monotonic() > deadline:
                break
            time.sleep(1)
        if problem:
            self.problems.append(f"[{client}] $ {line}\n    -> {problem}")
        return done

    def effect(self, client: str, what: str, predicate, timeout: float = 45) -> bool:
        """predicate() returns a true value once the effect shows; otherwise record what did not happen."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = predicate()
            if last is True:
                return True
            time.sleep(0.5)
        self.problems.append(f"[{client}] {what} (within {timeout:.0f} s; last seen: {last})")
        return False

    def states(self) -> dict[str, str]:
        listed = self.site.spur("squeue", "-h", "-t", "all", "-o", "%i %T")
        if listed.returncode != 0:
            return {"squeue failed": listed.stderr.strip()}
        return dict(line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line)

    def ended(self, *job_ids: str):
        def check():
            states = self.states()
            seen = {j: states.get(j, "") for j in job_ids}
            return True if all(s in ENDED for s in seen.values()) else seen

        return check

    def completed(self, *job_ids: str):
        def check():
            states = self.states()
            seen = {j: states.get(j, "") for j in job_ids}
            return True if all(s == "COMPLETED" for s in seen.values()) else seen

        return check


def job_id_from(pattern: str):
    def expect(stdout: str):
        return None if re.search(pattern, stdout) else f"answer {stdout!r} does not match {pattern!r}"

    return expect


def lines_starting(*prefixes: str):
    def expect(stdout: str):
        missing = [p for p in prefixes if not any(line.startswith(p) for line in stdout.splitlines())]
        return f"no line starting with {missing} in {stdout!r}" if missing else None

    return expect


def test_every_command_line_the_clients_send_is_accepted_and_does_what_slurm_does(slurm_site) -> None:
    site, check = slurm_site, Checker(slurm_site)
    folder = site.work / "logs"
    folder.mkdir()
    made = site.client(["-c", MAKE_SCRIPTS, str(folder)], 120, "making the clients' job scripts")
    assert made.returncode == 0, made.stderr
    for name, text in json.loads(made.stdout.splitlines()[-1]).items():
        (site.work / f"{name}.sh").write_text(text)

    # ---- submitit: sbatch FILE (reads "job N"), srun inside, sacct polls, scancel, scontrol requeue
    single = check.run("submitit", "sbatch submitit.sh", job_id_from(r"job (\d+)"))
    array = check.run("submitit", "sbatch submitit-array.sh", job_id_from(r"job (\d+)"))
    single_id = re.search(r"job (\d+)", single.stdout)
    array_id = re.search(r"job (\d+)", array.stdout)
    if single_id:
        job = single_id.group(1)
        if check.effect("submitit", f"job {job} (its srun step) completes", check.completed(job)):
            out = folder / f"{job}_0_log.out"
            if not out.exists() or "submitit-ok" not in out.read_text():
                check.problems.append(f"[submitit] srun --output {folder}/%j_%t_log.out: {out} lacks the output")
        check.run("submitit", f"sacct -o JobID,State,NodeList --parsable2 -j {job}",
                  lines_starting("JobID|State|NodeList", f"{job}|COMPLETED|"), retry=30)  # fmt: skip
    if array_id:
        arr = array_id.group(1)
        tasks = [f"{arr}_{t}" for t in range(4)]
        check.effect("submitit", f"the 4 tasks of array {arr} complete", check.completed(*tasks), 60)
        check.run("submitit", f"sacct -o JobID,State,NodeList --parsable2 -j {arr}",
                  lines_starting(*(f"{t}|COMPLETED|" for t in tasks)), retry=30)  # fmt: skip
        for t in range(4):
            out = folder / f"{arr}_{t}_0_log.out"
            text = out.read_text() if out.exists() else "(no such file)"
            if f"task-{t}" not in text:
                check.problems.append(f"[submitit] array task {arr}_{t} runs `srun ... echo task-$SLURM_ARRAY_TASK_ID`:"
                                      f" {out.name} holds {text[:200]!r}, not 'task-{t}'")  # fmt: skip
        # sbatch's --output %A_%a_0_log.out and srun's --output %A_%a_%t_log.out name the same file (open-mode append)
        expected = {f"{arr}_{t}_0_log.{ext}" for t in range(4) for ext in ("out", "err")}
        if single_id:
            expected |= {f"{single_id.group(1)}_0_log.{ext}" for ext in ("out", "err")}
        stray = sorted(p.name for p in folder.iterdir() if p.name[0].isdigit() and p.name not in expected)
        if stray:
            check.problems.append(f"[submitit] srun --output/--error %A_%a_%t_log.* inside array tasks made {stray}")
    sleeper = check.run("submitit", "sbatch --parsable --wrap 'sleep 300'", job_id_from(r"^\d+$")).stdout.strip()
    if sleeper.isdigit():
        check.effect("submitit", f"job {sleeper} starts", lambda: check.states().get(sleeper) == "RUNNING" or
                     check.states().get(sleeper))  # fmt: skip
        check.run("submitit", f"scontrol requeue {sleeper}")

        def requeued():
            shown = site.spur("scontrol", "show", "job", sleeper).stdout
            back = "Restarts=1" in shown and ("JobState=PENDING" in shown or "JobState=RUNNING" in shown)
            return back or shown[:300]

        check.effect("submitit", f"requeued job {sleeper} is pending or running again with Restarts=1", requeued)
        check.run("submitit", f"scancel {sleeper}")
        check.effect("submitit", f"cancelled job {sleeper} ends CANCELLED",
                     lambda: check.states().get(sleeper) == "CANCELLED" or check.states().get(sleeper))  # fmt: skip

    # ---- dask-jobqueue: sbatch FILE with -J -e -o -n --cpus-per-task --mem -t; scancel ID
    dask = check.run("dask-jobqueue", "sbatch dask.sh", job_id_from(r"\d+"))
    dask_id = re.search(r"(\d+)", dask.stdout)
    if dask_id:
        job = dask_id.group(1)
        check.effect("dask-jobqueue", f"job {job} starts", lambda: check.states().get(job) == "RUNNING" or
                     check.states().get(job))  # fmt: skip
        check.run("dask-jobqueue", f"scancel {job}")
        check.effect("dask-jobqueue", f"job {job} ends after scancel", check.ended(job))
        if not (folder / f"dask-worker-{job}.err").exists():
            check.problems.append(f"[dask-jobqueue] -e {folder}/dask-worker-%J.err: no dask-worker-{job}.err")

    # ---- snakemake-executor-plugin-slurm 2.8.0
    check.run("snakemake", "scontrol show config")  # MaxArraySize, MinJobAge
    check.run("snakemake", "sinfo -o %P", lambda out: None if "*" in out else f"no default partition in {out!r}")
    check.run("snakemake", "which sacct")
    # the account check the plugin runs when a workflow names an account (accounts.py validate_account); a new
    # cluster's store holds the user root in the account root, and no other user
    me = site.env["USER"]
    mine = "root|normal\n" if me == "root" else ""
    check.run("snakemake", f'sacctmgr -n -s list user "{me}" format=account%256',
              lambda out: None if out.split() == mine.split("|")[:1] * bool(mine) else f"accounts {out!r}")  # fmt: skip
    # Open OnDemand's job composer: the accounts and QOS a user may submit with
    check.run("ondemand", f"sacctmgr -nP show users withassoc format=account,qos where user={me}",
              lambda out: None if out == mine else f"{out!r}, not {mine!r}")  # fmt: skip
    common = (f"sbatch --parsable --job-name {RUN_NAME} --output {site.work}/snake/rule_x/%j.log --export=ALL "
              f"--comment rule_x   -p default -t 5 --mem 200 --ntasks=1 --cpus-per-task=1 -D {site.work}")  # fmt: skip
    (site.work / "snake" / "rule_x").mkdir(parents=True)
    (site.work / "snake" / "rule_arr").mkdir(parents=True)
    wrapped = check.run("snakemake", f'{common} --wrap="srun -n1 --cpu-bind=q  --cpus-per-task=1   --nodes=1 '
                        f'echo snake-ok"', job_id_from(r"^\d+"))  # fmt: skip
    piped = check.run("snakemake", f"{common} /dev/stdin", job_id_from(r"^\d+"), stdin="#!/bin/sh\necho piped-ok\n")
    arr_line = (f"sbatch --parsable --job-name {RUN_NAME} --output {site.work}/snake/rule_arr/%A_%a.log "
                f"--export=ALL --comment rule_arr_wildcards_a   -p default -t 5 --mem 201 --ntasks=1 "
                f"--cpus-per-task=1 -D {site.work} --array=1-3 "
                '--wrap="echo task-\\$SLURM_ARRAY_TASK_ID"')  # fmt: skip
    arrayed = check.run("snakemake", arr_line, job_id_from(r"^\d+"))
    ids = [r.stdout.strip().split(";")[0] for r in (wrapped, piped, arrayed)]
    if all(i.isdigit() for i in ids):
        tasks = [f"{ids[2]}_{t}" for t in (1, 2, 3)]
        check.effect("snakemake", f"jobs {ids[:2]} and array tasks {tasks} complete",
                     check.completed(ids[0], ids[1], *tasks), 60)  # fmt: skip
        log = site.work / "snake" / "rule_x" / f"{ids[0]}.log"
        if not log.exists() or "snake-ok" not in log.read_text():
            check.problems.append(f"[snakemake] --output .../%j.log with srun inside: {log} lacks 'snake-ok'")
        for t in (1, 2, 3):
            log = site.work / "snake" / "rule_arr" / f"{ids[2]}_{t}.log"
            text = log.read_text() if log.exists() else "(no such file)"
            if f"task-{t}" not in text:
                check.problems.append(f"[snakemake] array task {ids[2]}_{t} runs `echo task-$SLURM_ARRAY_TASK_ID`: "
                                      f"{log.name} holds {text[:200]!r}, not 'task-{t}'")  # fmt: skip
        start = f"{datetime.now() - timedelta(days=2):%Y-%m-%dT%H:00}"
        check.run("snakemake", f"sacct -X --parsable2 --clusters all --noheader --format=JobIdRaw,State "
                  f"--starttime {start} --endtime now --name {RUN_NAME}",
                  lines_starting(f"{ids[0]}|COMPLETED", f"{ids[1]}|COMPLETED", f"{ids[2]}|"), retry=30)  # fmt: skip
        check.run("snakemake", f"squeue --format='%i|%T' --states=all --noheader --name {RUN_NAME}",
                  lines_starting(f"{ids[0]}|COMPLETED", f"{ids[1]}|COMPLETED"))  # fmt: skip
        check.run(
            "snakemake",
            f"sacct -j {ids[0]} -n -X -o nodelist%-256",
            lambda out: None if out.strip() in {a.name for a in site.agents} else f"not a node: {out!r}",
        )
        check.run("snakemake", f"scancel {ids[0]} --clusters=all")  # a finished job: not an error

    assert not check.problems, "Spur refused or answered wrongly:\n" + "\n".join(check.problems)
