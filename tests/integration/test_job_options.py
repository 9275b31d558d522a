"""sbatch's placement and job options through real controllers and two real agents that declare different
features and gres: named and excluded nodes, exclusive jobs, gres held while a job runs, the environment a
job sees, its script arguments, --open-mode=append, and --signal before the time limit."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest

from agents import AgentProc
from harness import BIN, Proc, wait_until
from spur_hpc import model
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow
USR1 = 10


class Client:
    """Talks to whichever controller leads."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def stub(self):
        return self.cluster.stub(self.cluster.wait_leader())

    def request(self, script: str, work: Path, **spec) -> slurm_pb2.SubmitJobRequest:
        fields = {"name": "opt", "script": "#!/bin/bash\n" + script, "user": "root", "work_dir": str(work)}
        fields.update(spec)
        return slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(**fields))

    def submit(self, script: str, work: Path, **spec) -> int:
        return self.stub().SubmitJob(self.request(script, work, **spec), timeout=10).job_id

    def job(self, job_id: int) -> slurm_pb2.Job:
        return self.stub().GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)

    def node(self, name: str) -> slurm_pb2.Node:
        return self.stub().GetNode(slurm_pb2.GetNodeRequest(name=name), timeout=5)

    def state(self, job_id: int) -> str:
        return slurm_pb2.JobState.Name(self.job(job_id).state)

    def wait_state(self, job_id: int, states: set[str], timeout: float = 30.0) -> slurm_pb2.Job:
        return wait_until(
            lambda: self.job(job_id) if self.state(job_id) in states else None, timeout, f"job {job_id} in {states}"
        )


@pytest.fixture
def agents(cluster, tmp_path: Path) -> tuple[AgentProc, AgentProc]:
    """big: features ssd and big, one GPU; small: feature ssd, no gres. Both offer 4 CPUs."""
    big = AgentProc(
        tmp_path / "agent-big", cluster.hosts, extra='gres = "gpu=1,nic=2"\nfeatures = ["ssd", "big"]'
    ).start()
    small = AgentProc(tmp_path / "agent-small", cluster.hosts, extra='features = ["ssd"]').start()
    return big, small


def test_the_nodes_report_their_gres_and_features(cluster, agents) -> None:
    big, small = agents
    c = Client(cluster)
    node = c.node(big.name)
    assert dict(node.resources.gres) == {"gpu": 1, "nic": 2}
    assert list(node.features) == ["ssd", "big"]
    listed = {n.name: n for n in c.stub().ListNodes(slurm_pb2.ListNodesRequest(), timeout=5).nodes}
    assert list(listed[small.name].features) == ["ssd"] and not listed[small.name].resources.gres


def test_a_job_lands_on_the_node_it_names_and_an_excluded_node_stays_empty(cluster, agents, work) -> None:
    big, small = agents
    c = Client(cluster)
    named = c.submit("hostname\n", work, nodelist=small.name)
    assert list(c.wait_state(named, {"COMPLETED"}).nodes) == [small.name]
    spread = [c.submit("sleep 3\n", work, exclude=big.name) for _ in range(3)]
    for job_id in spread:
        assert list(c.wait_state(job_id, {"RUNNING"}).nodes) == [small.name]
    assert not c.node(big.name).job_ids, "the excluded node gets none of them"
    for job_id in spread:
        c.wait_state(job_id, {"COMPLETED"})


def test_a_job_naming_a_drained_node_waits_with_reason_reqnodenotavail(cluster, agents, work) -> None:
    _big, small = agents
    c = Client(cluster)
    drain = slurm_pb2.DrainNodeRequest(name=small.name, reason="repair", set_by="admin")
    c.stub().DrainNode(drain, timeout=5)
    job_id = c.submit("true\n", work, nodelist=small.name)
    wait_until(lambda: c.job(job_id).reason == "ReqNodeNotAvail", 10, "the reason ReqNodeNotAvail")
    assert c.state(job_id) == "PENDING"
    c.stub().ResumeNode(slurm_pb2.ResumeNodeRequest(name=small.name), timeout=5)
    assert list(c.wait_state(job_id, {"COMPLETED"}).nodes) == [small.name]


def test_an_exclusive_job_gets_a_node_alone(cluster, agents, work) -> None:
    big, small = agents
    c = Client(cluster)
    first = c.submit("sleep 30\n", work, nodelist=big.name)
    c.wait_state(first, {"RUNNING"})
    exclusive = c.submit("sleep 30\n", work, exclusive=True)
    assert list(c.wait_state(exclusive, {"RUNNING"}).nodes) == [small.name], "only the idle node takes it"
    assert c.node(small.name).allocated.cpus == 4
    assert slurm_pb2.NodeState.Name(c.node(small.name).state) == "ALLOCATED"
    other = c.submit("true\n", work)
    assert list(c.wait_state(other, {"COMPLETED"}).nodes) == [big.name], "nothing joins the exclusive job"
    assert list(c.node(small.name).job_ids) == [exclusive]
    for job_id in (first, exclusive):
        c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job_id), timeout=5)


def test_a_gres_job_waits_while_the_gres_are_taken(cluster, agents, work) -> None:
    big, _small = agents
    c = Client(cluster)
    holder = c.submit("sleep 4\n", work, gres="gpu:1")
    assert list(c.wait_state(holder, {"RUNNING"}).nodes) == [big.name]
    assert dict(c.node(big.name).allocated.gres) == {"gpu": 1}
    waiting = c.submit("true\n", work, gpus_per_node="1")
    time.sleep(1.0)
    job = c.job(waiting)
    assert slurm_pb2.JobState.Name(job.state) == "PENDING", "the only GPU is held"
    assert job.reason == "Resources"
    assert list(c.wait_state(waiting, {"COMPLETED"}).nodes) == [big.name]
    assert not dict(c.node(big.name).allocated.gres), "given back when the jobs ended"


def test_a_constraint_picks_the_node_with_the_features(cluster, agents, work) -> None:
    big, small = agents
    c = Client(cluster)
    assert list(c.wait_state(c.submit("true\n", work, constraint="big"), {"COMPLETED"}).nodes) == [big.name]
    either = c.submit("true\n", work, constraint="nvme|ssd", exclude=big.name)
    assert list(c.wait_state(either, {"COMPLETED"}).nodes) == [small.name]


@pytest.mark.parametrize(
    ("fields", "complaint"),
    [
        ({"nodelist": "nosuchnode"}, "node nosuchnode named by --nodelist does not exist"),
        ({"gres": "gpu:2"}, "asks for 2 gpu per node"),
        ({"constraint": "nvme"}, "have those features"),
        ({"constraint": "[ssd|big]"}, "is not supported"),
    ],
)
def test_a_job_that_can_never_fit_is_refused_at_submit_with_one_line(cluster, agents, work, fields, complaint):
    c = Client(cluster)
    with pytest.raises(grpc.RpcError) as caught:
        c.stub().SubmitJob(c.request("true\n", work, **fields), timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert complaint in caught.value.details() and "\n" not in caught.value.details()


def test_test_only_answers_where_and_when_and_submits_nothing(cluster, agents, work) -> None:
    big, _small = agents
    c = Client(cluster)
    before = c.stub().ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=5).jobs
    request = c.request("true\n", work, gres="gpu:1")
    request.test_only = True
    reply = c.stub().SubmitJob(request, timeout=10)
    assert list(reply.nodes) == [big.name] and reply.start_estimate > 0 and reply.job_id == 0
    after = c.stub().ListJobs(slurm_pb2.ListJobsRequest(include_finished=True), timeout=5).jobs
    assert len(after) == len(before)


def _env(path: Path) -> dict[str, str]:
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.startswith("SLURM_"))


def test_the_job_sees_slurms_environment_and_its_script_arguments(cluster, agents, work) -> None:
    big, small = agents
    c = Client(cluster)
    job_id = c.submit(
        'env | grep ^SLURM_ | sort\necho "ARGS=$#|$1|$2"\n',
        work,
        nodes=2,
        tasks=2,
        cpus_per_task=2,
        mem_per_cpu_mb=100,
        account="physics",
        qos="normal",
        submit_host="login7",
        partition="default",
        argv=["one", "two words"],
        stdout_path="env-%j.out",
    )
    job = c.wait_state(job_id, {"COMPLETED"})
    out = (work / f"env-{job_id}.out").read_text()
    assert "ARGS=2|one|two words" in out
    env = _env(work / f"env-{job_id}.out")
    expected = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_NODELIST": model.compress_hostlist(list(job.nodes)),
        "SLURM_NODELIST": model.compress_hostlist(list(job.nodes)),
        "SLURM_NNODES": "2",
        "SLURM_NTASKS": "2",
        "SLURM_CPUS_PER_TASK": "2",
        "SLURM_CPUS_ON_NODE": "2",
        "SLURM_MEM_PER_CPU": "100",
        "SLURM_SUBMIT_DIR": str(work),
        "SLURM_SUBMIT_HOST": "login7",
        "SLURM_JOB_PARTITION": "default",
        "SLURM_CLUSTER_NAME": cluster.name,
        "SLURM_RESTART_COUNT": "0",
        "SLURM_JOB_ACCOUNT": "physics",
        "SLURM_JOB_QOS": "normal",
    }
    assert {k: env.get(k) for k in expected} == expected
    assert sorted(job.nodes) == sorted([big.name, small.name])
    assert "SLURM_ARRAY_TASK_ID" not in env and "SLURM_MEM_PER_NODE" not in env


def test_an_array_task_sees_its_array_variables_and_writes_its_a_file(cluster, agents, work) -> None:
    c = Client(cluster)
    array_id = c.submit("env | grep ^SLURM_ARRAY | sort\n", work, array="1-5:2", stdout_path="arr-%A_%a.out")
    wait_until(lambda: all((work / f"arr-{array_id}_{t}.out").exists() for t in (1, 3, 5)), 60, "the 3 tasks")
    for task in (1, 3, 5):
        env = wait_until(lambda t=task: _env(work / f"arr-{array_id}_{t}.out") or None, 30, f"task {task}'s variables")
        assert env == {
            "SLURM_ARRAY_JOB_ID": str(array_id),
            "SLURM_ARRAY_TASK_ID": str(task),
            "SLURM_ARRAY_TASK_COUNT": "3",
            "SLURM_ARRAY_TASK_MIN": "1",
            "SLURM_ARRAY_TASK_MAX": "5",
            "SLURM_ARRAY_TASK_STEP": "2",
        }


def test_open_mode_append_keeps_the_earlier_output(cluster, agents, work) -> None:
    c = Client(cluster)
    c.wait_state(c.submit("echo first\n", work, stdout_path="same.out"), {"COMPLETED"})
    c.wait_state(c.submit("echo second\n", work, stdout_path="same.out", open_mode="append"), {"COMPLETED"})
    assert (work / "same.out").read_text() == "first\nsecond\n"
    c.wait_state(c.submit("echo third\n", work, stdout_path="same.out"), {"COMPLETED"})
    assert (work / "same.out").read_text() == "third\n", "without append the file is truncated, as in Slurm"


SIGNAL_SCRIPT = """
date +%s.%N > start.txt
on_usr1() { echo "shell $(date +%s.%N)" >> signals.txt; }
trap on_usr1 USR1
bash -c 'on_usr1() { echo "child $(date +%s.%N)" >> signals.txt; }; trap on_usr1 USR1; while :; do sleep 0.2; done' &
while :; do sleep 0.2; done
"""


@pytest.mark.parametrize(("batch_only", "who"), [(True, "shell"), (False, "child")])
def test_the_signal_arrives_before_the_time_limit(cluster, agents, work, batch_only: bool, who: str) -> None:
    """--signal=B:USR1@5 reaches the batch shell alone; without B: every process of the job but the shell."""
    c = Client(cluster)
    job_id = c.submit(
        SIGNAL_SCRIPT,
        work,
        time_limit_secs=8,
        signal_number=USR1,
        signal_secs=5,
        signal_batch_only=batch_only,
    )
    job = c.wait_state(job_id, {"TIMEOUT"}, timeout=40)
    lines = (work / "signals.txt").read_text().split()
    assert lines[0] == who and len(lines) == 2, f"only the {who} got it: {lines}"
    started, arrived = float((work / "start.txt").read_text()), float(lines[1])
    assert started < arrived < started + 8, "the signal came before the time limit"
    assert job.end_time >= arrived


def test_without_b_the_signal_reaches_an_srun_steps_task_once(cluster, agents, work) -> None:
    """submitit's layout (sbatch --signal=USR1@5, the work under srun): the step's task gets the signal once. A
    second one re-enters a handler that is still requeueing the job (submitit's scontrol requeue)."""
    c = Client(cluster)
    # A Python task, as submitit's: each signal runs the handler, which takes a while (a second one re-enters it).
    task = (
        "import signal, time\n"
        "def on_usr1(*_):\n"
        "    open('signals.txt', 'a').write('step %f\\n' % time.time())\n"
        "    time.sleep(1)\n"
        "signal.signal(signal.SIGUSR1, on_usr1)\n"
        "while True:\n"
        "    time.sleep(0.2)\n"
    )
    (work / "task.py").write_text(task)
    script = f"srun {sys.executable} task.py\n"
    environment = {"PATH": f"{BIN}:/usr/bin:/bin", "SPUR_CONTROLLER_ADDR": ",".join(cluster.hosts)}
    job_id = c.submit(script, work, time_limit_secs=8, signal_number=USR1, signal_secs=5, environment=environment)
    c.wait_state(job_id, {"TIMEOUT"}, timeout=40)
    lines = (work / "signals.txt").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("step "), lines


LEVEL_TWO = (
    "import sys; from spur_hpc.controller import wal; wal.MAX_WAL_LEVEL = 2; "
    "from spur_hpc.controller.daemon import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_cluster_at_wal_level_2_refuses_placement_options_with_one_line(make_cluster, work) -> None:
    """A member of the release before would hold only the CPUs and memory asked for, so its state would differ."""
    cluster = make_cluster(1, start=False)
    for m in cluster.members:
        cluster.write_conf(m)
        m.proc = Proc(
            f"spurctld-{m.index}-level2", [sys.executable, "-c", LEVEL_TWO, "--conf", str(m.conf_path)],
            m.root / "spurctld.log",
        ).start()  # fmt: skip
    c = Client(cluster)
    for option, field, value in (
        ("--exclusive", "exclusive", True),
        ("--gres", "gres", "gpu:1"),
        ("--nodelist", "nodelist", "n1"),
        ("--constraint", "constraint", "ssd"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            c.stub().SubmitJob(c.request("true\n", work, **{field: value}), timeout=10)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert caught.value.details() == f"{option} needs WAL level 3; finish the upgrade (spur cluster wal-level 3)"
    assert c.submit("true\n", work, tasks=4, ntasks_per_node=2) > 0, "derived counts are plain fields: taken"
