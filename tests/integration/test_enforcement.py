"""Resource enforcement end to end ([cgroup]): a controller, a real spurd and spurstepd, and this host's
cgroups (the v1 memory, cpuset and devices hierarchies of a hybrid host; see docs/agent.md)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from test_accounting_sacct_cluster import Shell

import pg
from agents import AgentProc
from harness import wait_until
from prereqs import needs_root
from spur_hpc.proto import slurm_pb2
from spur_hpc.stepd.enforce import BASE_DEVICE_RULES, attach_device_filter, find_v1_mounts
from spur_hpc.stepd.tracking import agent_cgroup_dir, find_cgroup2_mount

pytestmark = [pytest.mark.slow, needs_root()]

V1 = find_v1_mounts()
needs_v1 = pytest.mark.skipif(
    not {"memory", "cpuset", "devices"} <= set(V1), reason="needs the cgroup v1 memory, cpuset and devices hierarchies"
)


class Client:
    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def stub(self):
        return self.cluster.stub(self.cluster.wait_leader())

    def submit(self, script: str, work: Path, **spec) -> int:
        fields = {"name": "e", "script": "#!/bin/sh\n" + script, "user": "root", "work_dir": str(work)}
        fields.update(spec)
        return self.stub().SubmitJob(slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(**fields)), timeout=10).job_id

    def job(self, job_id: int) -> slurm_pb2.Job:
        return self.stub().GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)

    def wait_state(self, job_id: int, states: set[str], timeout: float = 30.0) -> slurm_pb2.Job:
        def reached():
            job = self.job(job_id)
            return job if slurm_pb2.JobState.Name(job.state) in states else None

        return wait_until(reached, timeout, f"job {job_id} to reach {states}")


def state(job: slurm_pb2.Job) -> str:
    return slurm_pb2.JobState.Name(job.state)


@pytest.fixture
def one(make_cluster):
    return make_cluster(1)  # its teardown removes the agents' cgroups, the v1 ones included (tests/agents.py)


def agent(one, tmp_path: Path, extra: str = "", cpus: int = 2, start: bool = True) -> AgentProc:
    spurd = AgentProc(tmp_path / "agent", one.hosts, extra=extra, cpus=cpus)
    return spurd.start() if start else spurd


@needs_v1
def test_a_job_over_its_memory_limit_ends_out_of_memory_and_one_within_it_completes(one, tmp_path, work):
    c = Client(one)
    spurd = agent(one, tmp_path)
    layout = spurd.status()["cgroup"]
    assert layout["use"]["memory"] in ("v1", "v2") and f"memory via {layout['use']['memory']}" in layout["summary"]
    hog = c.submit("python3 -c \"b = b'x' * (256 * 1024 * 1024)\"\n", work, memory_mb=64)
    small = c.submit("python3 -c \"b = b'x' * (8 * 1024 * 1024)\"\n", work, memory_mb=64)
    job = c.wait_state(hog, {"OUT_OF_MEMORY", "COMPLETED", "FAILED"})
    assert state(job) == "OUT_OF_MEMORY", job
    assert "oom-kill" in job.reason
    assert state(c.wait_state(small, {"OUT_OF_MEMORY", "COMPLETED", "FAILED"})) == "COMPLETED"


@needs_v1
def test_a_one_cpu_job_sees_one_cpu_and_two_such_jobs_get_different_cpus(one, tmp_path, work):
    c = Client(one)
    agent(one, tmp_path, cpus=2)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    script = (
        'python3 -c "import os, json; print(json.dumps(sorted(os.sched_getaffinity(0))))" > cpus-$SLURM_JOB_ID\n'
        "sleep 2\n"
    )
    jobs = [c.submit(script, work, cpus_per_task=1) for _ in range(2)]
    for job_id in jobs:
        assert state(c.wait_state(job_id, {"COMPLETED", "FAILED"})) == "COMPLETED"
    seen = [json.loads((work / f"cpus-{job_id}").read_text()) for job_id in jobs]
    assert all(len(cpus) == 1 for cpus in seen), seen
    assert seen[0] != seen[1], "two one-CPU jobs running together must not share their CPU"


def fake_gpus(tmp_path: Path) -> list[Path]:
    """Two device nodes standing in for GPUs: the kmsg and fuse character devices (both open as root)."""
    gpus = []
    for index, (major, minor) in enumerate(((1, 11), (10, 229))):
        path = tmp_path / "dev" / f"gpu{index}"
        path.parent.mkdir(exist_ok=True)
        os.mknod(path, 0o600 | 0o020000, os.makedev(major, minor))
        gpus.append(path)
    return gpus


PROBE = r"""python3 - <<'EOF' > probe-$SLURM_JOB_ID
import errno, json, os
result = {"cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "job_gpus": os.environ.get("SLURM_JOB_GPUS"),
          "rocr": os.environ.get("ROCR_VISIBLE_DEVICES"), "open": {}}
for name in ("gpu0", "gpu1"):
    try:
        os.close(os.open(os.path.join("DEVDIR", name), os.O_RDONLY))
        result["open"][name] = "ok"
    except OSError as exc:
        result["open"][name] = errno.errorcode[exc.errno]
print(json.dumps(result))
EOF
"""


@needs_v1
def test_a_gpu_job_opens_its_own_gpu_only_and_after_a_restart_the_next_job_gets_the_free_one(one, tmp_path, work):
    if shutil.which("python3") is None:
        pytest.skip("needs python3")
    gpus = fake_gpus(tmp_path)
    files = json.dumps([f"gpu={g}" for g in gpus])
    spurd = agent(one, tmp_path, extra=f'gres = "gpu=2"\ngres_files = {files}\n')
    c = Client(one)
    probe = PROBE.replace("DEVDIR", str(gpus[0].parent))
    first = c.submit(probe + "sleep 30\n", work, gres="gpu:1")
    c.wait_state(first, {"RUNNING"})
    out = work / f"probe-{first}"
    wait_until(lambda: out.exists() and out.read_text().endswith("\n") or None, 20, "the first job's probe")
    seen = json.loads(out.read_text())
    assert seen["cuda"] == seen["job_gpus"] == seen["rocr"] == "0", seen
    assert seen["open"] == {"gpu0": "ok", "gpu1": "EPERM"}, seen
    spurd.stop()
    spurd.start()
    second = c.submit(probe, work, gres="gpu:1")
    assert state(c.wait_state(second, {"COMPLETED", "FAILED"})) == "COMPLETED"
    seen = json.loads((work / f"probe-{second}").read_text())
    assert seen["cuda"] == "1", f"the restarted node must not hand out the GPU job {first} holds: {seen}"
    assert seen["open"] == {"gpu0": "EPERM", "gpu1": "ok"}, seen
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=first), timeout=5)


@needs_v1
def test_with_required_a_launch_whose_limits_cannot_be_installed_is_refused_and_the_job_requeued_then_held(
    one, tmp_path, work
):
    spurd = agent(one, tmp_path, extra="\n[cgroup]\nrequired = true\n", start=False)
    # The node's cpuset parent allows CPU 0 only, so a two-CPU job's cpuset cannot be written.
    parent = agent_cgroup_dir(V1["cpuset"], spurd.name, str(spurd.state_dir))
    os.makedirs(parent, exist_ok=True)
    for name in ("cpuset.cpus", "cpuset.mems"):
        top = os.path.dirname(parent)
        if not Path(top, name).read_text().strip():
            Path(top, name).write_text(Path(os.path.dirname(top), name).read_text().strip())
    Path(parent, "cpuset.mems").write_text(Path(os.path.dirname(parent), "cpuset.mems").read_text().strip())
    Path(parent, "cpuset.cpus").write_text("0")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    spurd.start()
    c = Client(one)
    job_id = c.submit("true\n", work, cpus_per_task=2)
    # Each refusal requeues the job; after the controller's launch attempts it is held and the node drained.
    job = wait_until(lambda: (j := c.job(job_id)).held and j, 60, "the refused launches to hold the job")
    assert state(job) == "PENDING" and job.attempt >= 2, job
    assert "cpuset not installed" in job.reason and "required = true refuses the launch" in job.reason, job.reason
    assert "\n" not in job.reason


pg_server, pg_database = pg.pg_server, pg.pg_database  # fixtures, bound by name


@needs_v1
def test_scontrol_and_sacct_show_an_out_of_memory_job_as_slurm_does(make_cluster, tmp_path, pg_database, pg_server):
    extra = f'[accounting]\ndatabase_url = "{pg_database.url}"\npassword_file = "{pg_server.password_file}"\n'
    one = make_cluster(1, extra_sections=extra)
    agent(one, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    shell = Shell(one, work)
    (work / "hog.sh").write_text("#!/bin/sh\npython3 -c \"b = b'x' * (256 * 1024 * 1024)\"\n")
    job_id = int(shell("sbatch", "--parsable", "--mem=64M", str(work / "hog.sh")).split(";")[0])
    wait_until(
        lambda: "JobState=OUT_OF_MEMORY" in shell("scontrol", "show", "job", str(job_id)) or None,
        60,
        "scontrol to show the job OUT_OF_MEMORY",
    )

    def ended() -> str | None:
        row = shell("sacct", "-j", str(job_id), "-X", "-n", "-P", "-o", "State,ExitCode").strip()
        return row if row and not row.startswith(("PENDING", "RUNNING")) else None

    row = wait_until(ended, 60, "accounting to record the job's end")
    assert row.split("|")[0] == "OUT_OF_MEMORY", row
    assert row.split("|")[1] in ("137:0", "0:9"), "the script's own exit status, as Slurm reports it"


@needs_v1
def test_a_step_runs_inside_its_jobs_limits_in_a_child_cgroup_and_an_oom_killed_step_ends_out_of_memory(
    one, tmp_path, work
):
    spurd = agent(one, tmp_path, cpus=2)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    shell = Shell(one, work)
    (work / "steps.sh").write_text(
        "#!/bin/sh\n"
        "srun python3 -c \"import os; print('cpus', len(os.sched_getaffinity(0)))\"\n"
        "srun cat /proc/self/cgroup\n"
        "srun python3 -c \"b = b'x' * (256 * 1024 * 1024)\"\n"
        'echo "srun exit $?"\n'
    )
    job_id = int(shell("sbatch", "--parsable", "-c", "1", "--mem=64M", str(work / "steps.sh")).split(";")[0])
    c = Client(one)
    c.wait_state(job_id, {"COMPLETED", "FAILED", "OUT_OF_MEMORY"}, timeout=60)
    output = (work / f"slurm-{job_id}.out").read_text()
    assert "cpus 1" in output, output
    parent = agent_cgroup_dir(V1["memory"], spurd.name, str(spurd.state_dir))
    own = os.path.relpath(parent, V1["memory"])
    assert f"memory:/{own}/job_{job_id}_1/step_1" in output, output
    # srun returns once its tasks' statuses arrive on its stream; the step's own report reaches the controller
    # through spurd and can come after the batch script's end, which first marks a still-running step CANCELLED
    # ("the job ended") and is then corrected by that report (controller/steps.py).
    def steps() -> dict[str, str]:
        return {step.step_id: slurm_pb2.JobState.Name(step.state) for step in c.job(job_id).steps}

    try:
        wait_until(lambda: steps().get("2") == "OUT_OF_MEMORY", 15, "step 2 to be recorded OUT_OF_MEMORY")
    except AssertionError:
        pytest.fail(f"step 2 is not OUT_OF_MEMORY: {steps()}", pytrace=False)
    assert "srun exit 0" not in output


@pytest.mark.skipif("cpu" not in V1, reason="needs the cgroup v1 cpu hierarchy")
def test_cpu_quota_true_gives_a_job_a_cfs_quota_of_its_cpus(one, tmp_path, work):
    c = Client(one)
    spurd = agent(one, tmp_path, extra="\n[cgroup]\ncpu_quota = true\n")
    script = 'cat $(awk -F: \'$2 == "cpu" {print "' + V1["cpu"] + "\" $3}' /proc/self/cgroup)/cpu.cfs_quota_us"
    job_id = c.submit(script + " > quota-$SLURM_JOB_ID\n", work, cpus_per_task=2)
    assert state(c.wait_state(job_id, {"COMPLETED", "FAILED"})) == "COMPLETED"
    assert (work / f"quota-{job_id}").read_text().strip() == "200000"
    assert "cpu via v1" in spurd.log_text()


@pytest.mark.skipif(find_cgroup2_mount() is None, reason="needs a cgroup2 mount")
def test_the_cgroup_v2_device_program_lets_a_process_open_the_allowed_devices_only(tmp_path):
    gpus = fake_gpus(tmp_path)
    cgroup = os.path.join(find_cgroup2_mount(), f"spur-test-devices-{os.getpid()}")
    os.mkdir(cgroup)
    try:
        rules = [*BASE_DEVICE_RULES, "c 1:11 rwm"]  # gpu0 (the kmsg device), not gpu1
        attach_device_filter(cgroup, rules)
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
                seen = {}
                for path in ("/dev/null", *map(str, gpus)):
                    try:
                        os.close(os.open(path, os.O_RDONLY))
                        seen[path] = "ok"
                    except OSError as exc:
                        seen[path] = errno.errorcode[exc.errno]
                os.write(write_end, json.dumps(seen).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        seen = json.loads(os.read(read_end, 65536))
        os.waitpid(pid, 0)
        assert seen == {"/dev/null": "ok", str(gpus[0]): "ok", str(gpus[1]): "EPERM"}, seen
    finally:
        os.rmdir(cgroup)
