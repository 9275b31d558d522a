# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Submit a job and wait for its end, or cancel one; read its output when it was written on this host."""

from __future__ import annotations

import os
import time

from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurConnection
from ansible_collections.spur.cluster.plugins.module_utils.spur_errors import SpurError, SpurInvalid, SpurTimeout
from ansible_collections.spur.cluster.plugins.module_utils.spur_model import FINISHED_STATES, output_file

POLL_SECS = 0.25
# Jobs submitted with an idempotency key carry it here, so check mode can find them by name and key.
KEY_VARIABLE = "SPUR_ANSIBLE_IDEMPOTENCY_KEY"


class SpurJobFailed(SpurError):
    """The job reached a terminal state other than COMPLETED with exit code 0."""


def output_path(job: dict) -> str:
    """Where the job's stdout lands: the file spurstepd writes (spur_model.output_file, Slurm's patterns)."""
    return output_file(job.get("stdout_path") or "", job.get("work_dir") or "/tmp", job["job_id"],
                       job.get("name") or "", job.get("user") or "", (job.get("nodes") or [""])[0])


def read_output(path: str, limit: int) -> str | None:
    """The last limit bytes of the output file, or None when it is not on this host (or not readable)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return None


def current_identity() -> tuple[str, int, int]:
    import pwd

    uid = os.getuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    return name, uid, os.getgid()


class JobRun:
    """spur_job: state finished (submit if needed, wait for the end), submitted, or cancelled."""

    def __init__(self, params: dict, check_mode: bool = False, clock=time.monotonic, sleep=time.sleep) -> None:
        self.params = params
        self.check_mode = check_mode
        self.clock = clock
        self.sleep = sleep
        if params["wait_timeout"] < 0:
            raise SpurInvalid("wait_timeout must not be negative, not %s" % params["wait_timeout"],
                              override="wait_timeout")
        self.connection = SpurConnection(params)

    def run(self) -> dict:
        try:
            if self.params["state"] == "cancelled":
                return self.cancel()
            return self.submit_and_wait()
        finally:
            self.connection.close()

    # ---------------------------------------------------------------- lookup

    def existing(self) -> list[dict]:
        """The jobs this task refers to: job_id, or name + idempotency_key."""
        params = self.params
        if params.get("job_id"):
            return [self.connection.get_job(params["job_id"])]
        key = params.get("idempotency_key")
        if not key:
            if params["state"] == "cancelled":
                return self.connection.list_jobs([params["name"]])
            return []
        return [j for j in self.connection.list_jobs([params["name"]])
                if j["environment"].get(KEY_VARIABLE) == key]

    def spec(self) -> dict:
        params = self.params
        user, uid, gid = current_identity()
        script = params.get("script")
        if script is None:
            script = "#!/bin/sh\n%s\n" % params["wrap"]
        environment = {str(k): str(v) for k, v in (params.get("environment") or {}).items()}
        if params.get("idempotency_key"):
            environment[KEY_VARIABLE] = params["idempotency_key"]
        spec = dict(
            name=params["name"],
            script=script,
            user=params.get("user") or user,
            uid=params["uid"] if params.get("uid") is not None else uid,
            gid=params["gid"] if params.get("gid") is not None else gid,
            work_dir=params["work_dir"],
            stdout_path=params.get("output") or "",
            nodes=params["nodes"],
            tasks=params["tasks"],
            cpus_per_task=params["cpus_per_task"],
            memory_mb=params["memory_mb"],
            time_limit_secs=params["time_limit"],
            partition=params.get("partition") or "",
            account=params.get("account") or "",
            environment=environment,
        )
        if not spec["work_dir"].startswith("/"):
            raise SpurInvalid("work_dir %r must be an absolute path" % spec["work_dir"], override="work_dir")
        return spec

    # ---------------------------------------------------------------- submit

    def submit_and_wait(self) -> dict:
        params = self.params
        found = self.existing()
        if found:
            job, changed, duplicate = found[0], False, True
        elif self.check_mode:
            return dict(changed=True, job_id=None, state=None, submitted=False,
                        msg="a job named %s would be submitted" % params["name"])
        else:
            job_id, duplicate = self.connection.submit_job(self.spec(), params.get("idempotency_key"))
            job, changed = self.connection.get_job(job_id), not duplicate
        if params["state"] == "finished" and not self.check_mode:
            job = self.wait_finished(job)
        return self.report(job, changed, duplicate)

    def wait_finished(self, job: dict) -> dict:
        deadline = self.clock() + self.params["wait_timeout"]
        while job["state"] not in FINISHED_STATES:
            if self.clock() >= deadline:
                raise SpurTimeout("job %d is still %s after %.0f s%s" % (
                    job["job_id"], job["state"], self.params["wait_timeout"],
                    " (%s)" % job["reason"] if job["reason"] and job["reason"] != "None" else ""),
                    override="wait_timeout", details=self.report(job, True, False))
            self.sleep(POLL_SECS)
            job = self.connection.get_job(job["job_id"])
        return job

    def report(self, job: dict, changed: bool, duplicate: bool) -> dict:
        path = output_path(job)
        finished = job["state"] in FINISHED_STATES
        output = read_output(path, self.params["output_limit"]) if finished else None
        result = dict(changed=changed, duplicate=duplicate, job_id=job["job_id"], state=job["state"],
                      exit_code=job["exit_code"], signal=job["signal"], reason=job["reason"], nodes=job["nodes"],
                      output_path=path, output=output, job=job)
        if (self.params["expect_success"] and finished and self.params["state"] == "finished"
                and (job["state"] != "COMPLETED" or job["exit_code"] != 0)):
            raise SpurJobFailed("job %d ended %s with exit code %d%s" % (
                job["job_id"], job["state"], job["exit_code"],
                " (%s)" % job["reason"] if job["reason"] and job["reason"] != "None" else ""),
                override="expect_success", details=result)
        return result

    # ---------------------------------------------------------------- cancel

    def cancel(self) -> dict:
        jobs = self.existing()
        live = [j for j in jobs if j["state"] not in FINISHED_STATES]
        if not live or self.check_mode:
            return dict(changed=bool(live), cancelled=[j["job_id"] for j in live],
                        jobs=[dict(job_id=j["job_id"], state=j["state"]) for j in jobs])
        for job in live:
            self.connection.cancel_job(job["job_id"], "spur.cluster")
        done = [self.wait_finished(self.connection.get_job(j["job_id"])) for j in live]
        return dict(changed=True, cancelled=[j["job_id"] for j in live],
                    jobs=[dict(job_id=j["job_id"], state=j["state"]) for j in done])
