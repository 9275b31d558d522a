#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Spur contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spur_job
short_description: Run a Spur batch job and wait for its end, or cancel jobs
version_added: 1.0.0
description:
  - With O(state=finished), submits a batch job (O(script), or O(wrap) for one command) and waits until it ends;
    returns its state, exit code and, when the output file is on the host running the module, its output.
    Fails when the job does not end COMPLETED with exit code 0, unless O(expect_success=false).
  - With O(state=submitted), submits and returns at once.
  - With O(state=cancelled), cancels O(job_id), or every unfinished job named O(name), and waits until they end.
  - Without O(idempotency_key) every run submits a new job. With it, the job is submitted once; later runs (and
    check mode) find it by O(name) and key and report on it without submitting again.
author:
  - Spur contributors (!UNKNOWN)
options:
  state:
    description:
      - V(finished) submits if needed and waits for the end; V(submitted) does not wait; V(cancelled) cancels.
    type: str
    choices: [finished, submitted, cancelled]
    default: finished
  name:
    description:
      - The job's name. With O(state=cancelled) and no O(job_id), every unfinished job of this name is cancelled.
    type: str
    default: spur-ansible
  script:
    description:
      - The batch script, starting with its C(#!) line.
    type: str
  wrap:
    description:
      - One shell command, run as C(#!/bin/sh) batch script (like C(sbatch --wrap)).
    type: str
  job_id:
    description:
      - An existing job to wait for or cancel, instead of submitting one.
    type: int
  idempotency_key:
    description:
      - Submit the job at most once; a later run with the same O(name) and key returns that job.
    type: str
  user:
    description:
      - The user the job runs as. Defaults to the user running the module.
    type: str
  uid:
    description:
      - The job's uid. Defaults to the uid running the module.
    type: int
  gid:
    description:
      - The job's gid. Defaults to the gid running the module.
    type: int
  work_dir:
    description:
      - The job's working directory (absolute), where relative output paths land.
    type: path
    default: /tmp
  output:
    description:
      - The stdout file (Slurm patterns C(%j), C(%x), C(%u), C(%N) work), relative to O(work_dir).
        Defaults to C(slurm-%j.out).
    type: str
  nodes:
    description:
      - Nodes the job needs.
    type: int
    default: 1
  tasks:
    description:
      - Tasks the job runs.
    type: int
    default: 1
  cpus_per_task:
    description:
      - CPUs per task.
    type: int
    default: 1
  memory_mb:
    description:
      - Memory per node in MB; V(0) asks for none in particular.
    type: int
    default: 0
  time_limit:
    description:
      - The job's time limit in seconds; V(0) means none.
    type: int
    default: 0
  partition:
    description:
      - The partition. Defaults to the cluster's default partition.
    type: str
  account:
    description:
      - The account to charge.
    type: str
  environment:
    description:
      - Environment variables for the job.
    type: dict
    default: {}
  wait_timeout:
    description:
      - Seconds to wait for the job (or the cancelled jobs) to end.
    type: float
    default: 300
  expect_success:
    description:
      - With O(state=finished), fail unless the job ends COMPLETED with exit code 0.
    type: bool
    default: true
  output_limit:
    description:
      - Return at most this many bytes of the end of the output file.
    type: int
    default: 65536
extends_documentation_fragment:
  - spur.cluster.connection
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details:
      - Nothing is submitted, cancelled or waited for. With O(idempotency_key), an earlier submission is found
        and reported.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
    details: A job has no before and after to show.
seealso:
  - module: spur.cluster.spur_cluster_health
"""

EXAMPLES = r"""
- name: Verify the cluster runs work
  spur.cluster.spur_job:
    name: upgrade-verify
    wrap: hostname && echo spur-ok
    work_dir: /tmp
    wait_timeout: 120
  register: __spur_verify

- name: Check the job's output
  ansible.builtin.assert:
    that: "'spur-ok' in __spur_verify.output"

- name: Submit a long job once, whatever the number of runs
  spur.cluster.spur_job:
    state: submitted
    name: nightly-index
    idempotency_key: "nightly-{{ ansible_date_time.date }}"
    script: |
      #!/bin/sh
      /opt/tools/reindex --all
    time_limit: 7200

- name: Cancel every unfinished job of that name
  spur.cluster.spur_job:
    state: cancelled
    name: nightly-index
"""

RETURN = r"""
job_id:
  description: The job's id (null in check mode before a submission).
  returned: with O(state=finished) or O(state=submitted)
  type: int
  sample: 42
state:
  description: The job's state (PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL).
  returned: with O(state=finished) or O(state=submitted)
  type: str
  sample: COMPLETED
exit_code:
  description: The job's exit code.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: int
  sample: 0
signal:
  description: The signal that ended the job, 0 when none did.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: int
reason:
  description: The controller's reason for the job's state.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: str
nodes:
  description: The nodes the job ran on.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: list
  elements: str
duplicate:
  description: True when the job had been submitted before (same O(idempotency_key), or O(job_id)).
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: bool
output_path:
  description: Where the job's stdout goes.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: str
  sample: /tmp/slurm-42.out
output:
  description: The end of the output file, null when the job has not ended or the file is not on this host.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: str
  sample: "node01\nspur-ok\n"
job:
  description: The whole job record from the controllers.
  returned: with O(state=finished) or O(state=submitted), when a job exists
  type: dict
cancelled:
  description: Ids of the jobs cancelled (or that would be, in check mode).
  returned: with O(state=cancelled)
  type: list
  elements: int
jobs:
  description: The jobs O(state=cancelled) looked at, each with C(job_id) and C(state).
  returned: with O(state=cancelled)
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.spur.cluster.plugins.module_utils.spur_client import SpurError, connection_argument_spec
from ansible_collections.spur.cluster.plugins.module_utils.spur_jobs import JobRun


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(
        state=dict(type="str", choices=["finished", "submitted", "cancelled"], default="finished"),
        name=dict(type="str", default="spur-ansible"),
        script=dict(type="str"),
        wrap=dict(type="str"),
        job_id=dict(type="int"),
        idempotency_key=dict(type="str", no_log=False),
        user=dict(type="str"),
        uid=dict(type="int"),
        gid=dict(type="int"),
        work_dir=dict(type="path", default="/tmp"),
        output=dict(type="str"),
        nodes=dict(type="int", default=1),
        tasks=dict(type="int", default=1),
        cpus_per_task=dict(type="int", default=1),
        memory_mb=dict(type="int", default=0),
        time_limit=dict(type="int", default=0),
        partition=dict(type="str"),
        account=dict(type="str"),
        environment=dict(type="dict", default={}),
        wait_timeout=dict(type="float", default=300),
        expect_success=dict(type="bool", default=True),
        output_limit=dict(type="int", default=65536),
    )
    return spec


def main() -> None:
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        mutually_exclusive=[("script", "wrap", "job_id"), ("job_id", "idempotency_key")],
        required_if=[
            ("state", "finished", ("script", "wrap", "job_id"), True),
            ("state", "submitted", ("script", "wrap"), True),
        ],
    )
    try:
        result = JobRun(module.params, check_mode=module.check_mode).run()
    except SpurError as exc:
        module.fail_json(**exc.fail_result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
