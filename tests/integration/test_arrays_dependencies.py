"""Arrays, dependencies, holds, requeue and update through the gRPC API, on real controllers and agents."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpc
import pytest
from test_auth import auth_section, credential, munge, shared_dir  # noqa: F401 (fixtures)
from test_auth import pytestmark as needs_munged

from agents import AgentProc, pid_alive
from harness import Proc, wait_until
from spur_hpc.proto import slurm_pb2

pytestmark = pytest.mark.slow


class Client:
    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def stub(self):
        return self.cluster.stub(self.cluster.wait_leader())

    def submit(self, script: str, work: Path, **spec) -> int:
        fields = {"name": "ad", "script": "#!/bin/sh\n" + script, "user": "root", "work_dir": str(work)}
        fields.update(spec)
        request = slurm_pb2.SubmitJobRequest(spec=slurm_pb2.JobSpec(**fields))
        return self.stub().SubmitJob(request, timeout=10).job_id

    def job(self, job_id: int) -> slurm_pb2.Job:
        return self.stub().GetJob(slurm_pb2.GetJobRequest(job_id=job_id), timeout=5)

    def records(self, job_id: int) -> list[slurm_pb2.Job]:
        return list(self.stub().ListJobs(slurm_pb2.ListJobsRequest(job_ids=[job_id]), timeout=5).jobs)

    def state(self, job_id: int) -> str:
        return slurm_pb2.JobState.Name(self.job(job_id).state)

    def wait(self, job_id: int, states: set[str], timeout: float = 30.0) -> slurm_pb2.Job:
        return wait_until(
            lambda: self.job(job_id) if self.state(job_id) in states else None, timeout, f"job {job_id} in {states}"
        )

    def wait_reason(self, job_id: int, reason: str, timeout: float = 20.0) -> slurm_pb2.Job:
        return wait_until(
            lambda: self.job(job_id) if self.job(job_id).reason == reason else None,
            timeout,
            f"job {job_id} to wait with reason {reason}",
        )


def refused(call, code: grpc.StatusCode) -> str:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, info.value.details()
    assert "\n" not in info.value.details()
    return info.value.details()


@pytest.fixture
def one(make_cluster):
    """One controller (a cluster of one), cheaper than three for what does not test replication."""
    return make_cluster(1)


def test_an_array_runs_each_task_as_a_record_of_its_own_within_its_throttle(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=4).start()
    array = c.submit("sleep 1\n", work, array="0-4%2")
    seen_running = set()

    def all_done():
        records = c.records(array)
        running = [r for r in records if r.state == slurm_pb2.RUNNING]
        assert len(running) <= 2, f"the %2 throttle let {len(running)} tasks run"
        seen_running.update(r.array_task_id for r in running)
        done = [r for r in records if r.state == slurm_pb2.COMPLETED and not r.array_pending]
        return records if len(done) == 5 else None

    records = wait_until(all_done, 60, "every task of the array to complete")
    by_task = {r.array_task_id: r for r in records}
    assert sorted(by_task) == [0, 1, 2, 3, 4] and all(r.array_job_id == array for r in records)
    assert by_task[4].job_id == array, "the last task runs on the array's own record"
    assert sorted(r.job_id for r in records)[1:] == sorted(r.job_id for r in records if r.job_id != array)
    assert len({r.job_id for r in records}) == 5, "each task has its own job id"
    assert seen_running, "tasks were seen running"


def test_cancel_named_tasks_then_the_whole_array(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=1).start()
    array = c.submit("sleep 60\n", work, array="0-9")
    first = wait_until(
        lambda: next((r for r in c.records(array) if r.state == slurm_pb2.RUNNING), None), 30, "a task to run"
    )
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=array, array_tasks="5-9"), timeout=10)
    assert c.job(array).array_pending == "1-4"
    missing = refused(
        lambda: c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=array, array_tasks="42"), timeout=10),
        grpc.StatusCode.NOT_FOUND,
    )
    assert "no task 42" in missing
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=array), timeout=10)
    c.wait(first.job_id, {"CANCELLED"})
    assert {slurm_pb2.JobState.Name(r.state) for r in c.records(array)} == {"CANCELLED"}


def test_dependencies_wait_start_or_are_never_satisfied(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=4).start()
    failing = c.submit("sleep 2; exit 3\n", work)
    on_ok = c.submit("true\n", work, dependency=f"afterok:{failing}")
    on_fail = c.submit("true\n", work, dependency=f"afternotok:{failing}")
    killed = c.submit("true\n", work, dependency=f"afterok:{failing}", kill_on_invalid_dep=True)
    assert c.job(on_ok).reason == "Dependency"
    c.wait(failing, {"FAILED"})
    c.wait(on_fail, {"COMPLETED"})
    c.wait_reason(on_ok, "DependencyNeverSatisfied")
    ended = c.wait(killed, {"CANCELLED"})
    assert ended.reason == "DependencyNeverSatisfied"
    assert c.state(on_ok) == "PENDING"
    never = refused(lambda: c.submit("true\n", work, dependency="afterok:999999"), grpc.StatusCode.INVALID_ARGUMENT)
    assert "job 999999 does not exist" in never
    bad = refused(lambda: c.submit("true\n", work, dependency="afterwards:1"), grpc.StatusCode.INVALID_ARGUMENT)
    assert "not a dependency type" in bad


def test_a_job_submitted_held_starts_only_when_released_and_an_update_changes_it(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=4).start()
    held = c.submit("true\n", work, hold=True, time_limit_secs=600)
    assert c.wait_reason(held, "JobHeldUser").held
    update = slurm_pb2.UpdateJobRequest(
        job_id=held,
        fields=["time_limit_secs", "name", "nice"],
        spec=slurm_pb2.JobSpec(time_limit_secs=120, name="renamed", nice=10),
    )
    updated = c.stub().UpdateJob(update, timeout=10)
    assert (updated.spec.time_limit_secs, updated.spec.name, updated.spec.nice) == (120, "renamed", 10)
    wrong = slurm_pb2.UpdateJobRequest(job_id=held, fields=["script"], spec=slurm_pb2.JobSpec(script="x"))
    chained = c.submit("true\n", work, dependency=f"afterok:{held}")
    circle = slurm_pb2.UpdateJobRequest(
        job_id=held, fields=["dependency"], spec=slurm_pb2.JobSpec(dependency=f"afterany:{chained}")
    )
    message = refused(lambda: c.stub().UpdateJob(circle, timeout=10), grpc.StatusCode.INVALID_ARGUMENT)
    assert f"circle ({held} -> {chained} -> {held})" in message
    assert "cannot change script" in refused(
        lambda: c.stub().UpdateJob(wrong, timeout=10), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert c.state(held) == "PENDING"
    c.stub().ReleaseJob(slurm_pb2.ReleaseJobRequest(job_id=held), timeout=10)
    c.wait(held, {"COMPLETED"})


def test_a_requeued_running_job_runs_again_with_a_restart_counted(cluster, tmp_path, work):
    c = Client(cluster)
    agent = AgentProc(tmp_path / "agent", cluster.hosts, cpus=4).start()
    job = c.submit("sleep 60\n", work)
    c.wait(job, {"RUNNING"})
    first = wait_until(lambda: agent.running().get(job), 20, "the agent to hold the job")
    requeued = c.stub().RequeueJob(slurm_pb2.RequeueJobRequest(job_id=job), timeout=10)
    assert (slurm_pb2.JobState.Name(requeued.state), requeued.restart_count) == ("PENDING", 1)
    wait_until(lambda: not pid_alive(first["supervisor_pid"]), 20, "the first run's supervisor to stop")
    again = c.wait(job, {"RUNNING"})
    assert again.attempt == first["attempt"] + 1 and again.restart_count == 1
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job), timeout=10)
    c.wait(job, {"CANCELLED"})
    hold = c.stub().RequeueJob(slurm_pb2.RequeueJobRequest(job_id=job, hold=True), timeout=10)
    assert (hold.held, hold.reason, hold.restart_count) == (True, "JobHeldUser", 2)


LEVEL_TWO = (
    "import sys; from spur_hpc.controller import wal; wal.MAX_WAL_LEVEL = 2; "
    "from spur_hpc.controller.daemon import main; sys.exit(main(sys.argv[1:]))"
)


def test_a_cluster_at_wal_level_2_refuses_arrays_and_dependencies_with_one_line(make_cluster, work):
    cluster = make_cluster(1, start=False)
    for m in cluster.members:
        cluster.write_conf(m)
        m.proc = Proc(
            f"spurctld-{m.index}-level2", [sys.executable, "-c", LEVEL_TWO, "--conf", str(m.conf_path)],
            m.root / "spurctld.log",
        ).start()  # fmt: skip
    c = Client(cluster)
    for option, value in (("array", "0-3"), ("dependency", "afterany:1"), ("hold", True)):
        message = refused(
            lambda o=option, v=value: c.submit("true\n", work, **{o: v}), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "needs WAL level 3; finish the upgrade (spur cluster wal-level 3)" in message
    assert c.submit("true\n", work) > 0, "a plain job is still taken"


def test_a_batch_job_whose_node_fails_is_requeued_and_runs_elsewhere(make_cluster, tmp_path, work):
    cluster = make_cluster(1, heartbeat_timeout=3)
    c = Client(cluster)
    first = AgentProc(tmp_path / "first", cluster.hosts, cpus=4, heartbeat_timeout=3).start()
    job = c.submit("sleep 60\n", work)
    c.wait(job, {"RUNNING"})
    wait_until(lambda: job in first.running(), 20, "the first agent to run the job")
    second = AgentProc(tmp_path / "second", cluster.hosts, cpus=4, heartbeat_timeout=3).start()
    first.kill9()

    def running_again():
        record = c.job(job)
        return record if record.state == slurm_pb2.RUNNING and record.restart_count == 1 else None

    again = wait_until(running_again, 40, "the job to run again after its node failed")
    assert list(again.nodes) == [second.name]
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=job), timeout=10)
    c.wait(job, {"CANCELLED"})


def test_with_job_requeue_false_a_job_is_kept_from_requeue(make_cluster, tmp_path, work):
    cluster = make_cluster(1, extra_controller="job_requeue = false")
    c = Client(cluster)
    AgentProc(tmp_path / "agent", cluster.hosts, cpus=4).start()
    job = c.submit("sleep 60\n", work)
    assert c.wait(job, {"RUNNING"}).spec.requeue == 2, "the cluster's default is kept with the job"
    message = refused(
        lambda: c.stub().RequeueJob(slurm_pb2.RequeueJobRequest(job_id=job), timeout=10),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "may not be requeued" in message and "job_requeue" in message
    allowed = c.submit("sleep 60\n", work, requeue=1)
    c.wait(allowed, {"RUNNING"})
    assert c.stub().RequeueJob(slurm_pb2.RequeueJobRequest(job_id=allowed), timeout=10).restart_count == 1
    for j in (job, allowed):
        c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=j), timeout=10)


def test_begin_time_deadline_and_nice_decide_when_and_in_which_order_jobs_start(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=1).start()
    blocker = c.submit("sleep 5\n", work)
    c.wait(blocker, {"RUNNING"})
    late = c.submit("true\n", work, nice=10)
    early = c.submit("true\n", work)
    expired = c.submit("true\n", work, deadline=time.time() + 2)
    begin = c.submit("true\n", work, begin_time=time.time() + 3600)
    assert c.job(begin).reason == "BeginTime"
    ended = c.wait(expired, {"DEADLINE"})
    assert ended.reason == "DeadLine"
    c.wait(late, {"COMPLETED"})
    assert c.job(early).start_time < c.job(late).start_time, "the lower nice started first"
    assert c.state(begin) == "PENDING" and c.job(begin).reason == "BeginTime"
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=begin), timeout=10)


def test_requeue_of_an_array_id_requeues_each_task_that_started(one, tmp_path, work):
    c = Client(one)
    AgentProc(tmp_path / "agent", one.hosts, cpus=2).start()
    array = c.submit("sleep 60\n", work, array="0-1")

    def both(state: int, restarts: int):
        records = c.records(array)
        ok = len(records) == 2 and all(r.state == state and r.restart_count == restarts for r in records)
        return records if ok else None

    wait_until(lambda: both(slurm_pb2.RUNNING, 0), 30, "both tasks to run")
    c.stub().RequeueJob(slurm_pb2.RequeueJobRequest(job_id=array), timeout=10)
    assert both(slurm_pb2.PENDING, 1), "each task is back in the queue"
    wait_until(lambda: both(slurm_pb2.RUNNING, 1), 30, "both tasks to run again")
    c.stub().CancelJob(slurm_pb2.CancelJobRequest(job_id=array), timeout=10)
    wait_until(lambda: both(slurm_pb2.CANCELLED, 1), 30, "both tasks to be cancelled")


@needs_munged
def test_only_an_administrator_raises_priority_or_time_limit_or_ends_an_admin_hold(make_cluster, shared_dir, munge):  # noqa: F811, E501
    cluster = make_cluster(1, extra_sections=auth_section(munge))
    stub = cluster.stub(cluster.wait_leader())

    def as_user(nobody: bool):
        return (("spur-auth", credential(munge, as_nobody=nobody)),)

    def submit(**spec) -> slurm_pb2.SubmitJobRequest:
        return slurm_pb2.SubmitJobRequest(
            spec=slurm_pb2.JobSpec(script="#!/bin/sh\ntrue\n", work_dir=str(shared_dir), **spec)
        )

    denied = grpc.StatusCode.PERMISSION_DENIED
    message = refused(lambda: stub.SubmitJob(submit(nice=-1), timeout=10, metadata=as_user(True)), denied)
    assert "negative --nice" in message
    job = stub.SubmitJob(submit(hold=True, time_limit_secs=600), timeout=10, metadata=as_user(True)).job_id

    def limit(secs: int, nobody: bool = True) -> slurm_pb2.Job:
        request = slurm_pb2.UpdateJobRequest(
            job_id=job, fields=["time_limit_secs"], spec=slurm_pb2.JobSpec(time_limit_secs=secs)
        )
        return stub.UpdateJob(request, timeout=10, metadata=as_user(nobody))

    assert "raise the time limit" in refused(lambda: limit(1200), denied)
    assert "raise the time limit" in refused(lambda: limit(0), denied), "0 is no limit at all"
    assert limit(300).spec.time_limit_secs == 300, "the owner may lower it"
    assert limit(900, nobody=False).spec.time_limit_secs == 900
    held = stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=job), timeout=10, metadata=as_user(False))
    assert held.reason == "JobHeldAdmin"
    release = slurm_pb2.ReleaseJobRequest(job_id=job)
    assert "only an administrator" in refused(
        lambda: stub.ReleaseJob(release, timeout=10, metadata=as_user(True)), denied
    )
    assert not stub.ReleaseJob(release, timeout=10, metadata=as_user(False)).held
    again = stub.HoldJob(slurm_pb2.HoldJobRequest(job_id=job), timeout=10, metadata=as_user(True))
    assert again.reason == "JobHeldUser"
    assert not stub.ReleaseJob(release, timeout=10, metadata=as_user(True)).held, "the owner releases their own hold"
