"""Slurm 22.05's priority/basic in the state machine (the numbers squeue %Q shows and the planner's order) and the
reasons a job keeps when it ends or is cancelled (squeue %r, NODELIST(REASON), scontrol's Reason=)."""

from __future__ import annotations

from test_dependencies import cluster, end, planned, rec, start, submit

from spur_hpc.model import TOP_PRIORITY


def priority(s, job_id) -> int:
    return s.jobs[job_id]["priority"]


def test_each_job_gets_one_below_the_last_and_a_held_one_zero_until_released() -> None:
    s = cluster(level=4)
    first, second = submit(s), submit(s)
    held = submit(s, hold=True)
    after = submit(s)
    # as in the capture: 4294901759, 4294901758, 0 for the held job, which takes no number, then 4294901757
    assert [priority(s, j) for j in (first, second, held, after)] == [TOP_PRIORITY - 1, TOP_PRIORITY - 2, 0,
                                                                        TOP_PRIORITY - 3]  # fmt: skip
    s.apply(rec("job_release", job_id=held))
    assert priority(s, held) == TOP_PRIORITY - 4, "released, it queues behind every job given a priority before"
    s.apply(rec("job_hold", job_id=second, reason="JobHeldAdmin"))
    assert priority(s, second) == 0


def test_nice_lowers_a_priority_without_moving_the_count_and_an_update_moves_it_by_the_change() -> None:
    s = cluster(level=4)
    nice = submit(s, nice=100)
    plain = submit(s)
    assert (priority(s, nice), priority(s, plain)) == (TOP_PRIORITY - 1 - 100, TOP_PRIORITY - 2)
    result = s.apply(rec("job_update", job_id=plain, changes={"nice": 10}, time=2.0))
    assert result["ok"] and priority(s, plain) == TOP_PRIORITY - 12


def test_the_planner_takes_the_highest_priority_first_so_a_released_job_waits_behind_the_others() -> None:
    s = cluster(level=4, cpus=1)
    held = submit(s, hold=True)
    later = submit(s)
    s.apply(rec("job_release", job_id=held))
    assert planned(s) == [later], "one CPU: the job submitted after the hold but given its priority first runs"


def test_an_arrays_tasks_share_its_priority() -> None:
    s = cluster(level=4)
    array = submit(s, array="0-2")
    task = start(s, array)
    assert task != array and priority(s, task) == priority(s, array) == TOP_PRIORITY - 1


def test_an_ended_job_keeps_slurms_reason() -> None:
    s = cluster(level=4)
    failed, timed_out, done = submit(s), submit(s), submit(s)
    for job_id in (failed, timed_out, done):
        start(s, job_id)
    end(s, failed, state="FAILED", exit_code=3)
    end(s, done)
    job = s.jobs[timed_out]
    s.apply(rec("job_end", job_id=timed_out, attempt=job["attempt"], state="TIMEOUT", exit_code=0, signal=15,
                time=20.0, reason="time limit"))  # fmt: skip
    assert [s.jobs[j]["reason"] for j in (failed, timed_out, done)] == ["NonZeroExitCode", "TimeLimit", "None"]


def test_a_launch_failure_keeps_its_own_words_and_a_failure_without_them_is_jobLaunchFailure() -> None:
    s = cluster(level=4)
    refused, killed = submit(s), submit(s)
    for job_id in (refused, killed):
        start(s, job_id)
    for job_id, detail in ((refused, "cannot enter work_dir /gone"), (killed, "")):
        job = s.jobs[job_id]
        s.apply(rec("job_end", job_id=job_id, attempt=job["attempt"], state="FAILED", exit_code=0, signal=9,
                    time=20.0, reason=detail))  # fmt: skip
    assert (s.jobs[refused]["reason"], s.jobs[killed]["reason"]) == ("cannot enter work_dir /gone", "JobLaunchFailure")


def test_a_job_cancelled_while_it_waits_keeps_the_reason_it_waited_for() -> None:
    s = cluster(level=4)
    held, waiting = submit(s, hold=True), submit(s)
    s.apply(rec("job_cancel", job_id=held, by="root", time=5.0))  # no reason sent: the stored one stays
    s.apply(rec("job_cancel", job_id=waiting, by="root", time=5.0, reason="Priority"))  # what squeue showed
    assert (s.jobs[held]["state"], s.jobs[held]["reason"]) == ("CANCELLED", "JobHeldUser")
    assert (s.jobs[waiting]["state"], s.jobs[waiting]["reason"]) == ("CANCELLED", "Priority")


def test_before_level_4_the_reasons_are_the_reports_words() -> None:
    s = cluster(level=3)
    waiting = submit(s)
    s.apply(rec("job_cancel", job_id=waiting, by="root", time=5.0, reason="Priority"))
    assert s.jobs[waiting]["reason"] == "cancelled by root", "a level-3 member would write this; so does a new one"


def test_one_job_asked_for_says_priority_as_the_whole_queue_does_and_keeps_it_when_cancelled() -> None:
    from types import SimpleNamespace

    from test_dispatch_hold import _Raft

    from spur_hpc.controller.service import ControllerService

    s = cluster(level=4, cpus=4)
    start(s, submit(s, cpus_per_task=4))  # the node is full
    blocked, behind = submit(s, cpus_per_task=4), submit(s)
    conf = SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30.0))
    service = ControllerService(conf, _Raft(s), lambda addr: None, clock=lambda: 1000.0)
    everyone = {j["job_id"]: j["reason"] for j in service.list_jobs()}
    assert (everyone[blocked], everyone[behind]) == ("Resources", "Priority")
    assert [j["reason"] for j in service.list_jobs(job_ids=[behind])] == ["Priority"], "squeue -j says what squeue does"
    assert service.get_job(behind)["reason"] == "Priority"
    service.cancel(behind, 0, "root")
    assert (s.jobs[behind]["state"], s.jobs[behind]["reason"]) == ("CANCELLED", "Priority")


def test_listings_share_the_reasons_until_a_record_is_applied_or_the_clock_reaches_a_begin_time() -> None:
    from types import SimpleNamespace

    from test_dispatch_hold import _Raft

    from spur_hpc.controller.service import ControllerService

    s = cluster(level=4, cpus=4)
    running = submit(s, cpus_per_task=4)
    start(s, running)  # the node is full
    blocked, behind = submit(s, cpus_per_task=4), submit(s)
    later = submit(s, begin_time=1000.5)
    clock = [1000.0]
    conf = SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30.0))
    service = ControllerService(conf, _Raft(s), lambda addr: None, clock=lambda: clock[0])

    def reasons(**filters) -> dict[int, str]:
        return {j["job_id"]: j["reason"] for j in service.list_jobs(**filters) if j["state"] == "PENDING"}

    def from_scratch() -> dict[int, str]:
        jobs = [j for j in s.jobs.values() if j["state"] == "PENDING"]
        shown = service.shown_in_plan_order(s, jobs, clock[0], {}, whole_queue=True)
        return {j["job_id"]: shown.get(j["job_id"], j)["reason"] for j in jobs}

    assert reasons() == from_scratch() == {blocked: "Resources", behind: "Priority", later: "BeginTime"}
    worked_out = service._listed
    assert reasons(job_ids=[behind]) == {behind: "Priority"} and service._listed is worked_out, "read, not redone"
    clock[0] = 1000.4  # before the begin time nothing the reasons read has changed
    assert reasons()[later] == "BeginTime" and service._listed is worked_out
    clock[0] = 1000.5
    assert reasons() == from_scratch() and reasons()[later] == "Priority", "the begin time: worked out again"
    assert service._listed is not worked_out
    end(s, running, now=1001.0)  # a record applied: the node is free
    assert reasons() == from_scratch() and reasons()[blocked] != "Resources"


def test_the_answer_to_a_whole_queue_listing_is_kept_until_the_listing_would_differ() -> None:
    from types import SimpleNamespace

    from test_dispatch_hold import _Raft

    from spur_hpc.controller.service import ControllerService

    s = cluster(level=4, cpus=4)
    first, second = submit(s), submit(s)
    clock = [1000.0]
    conf = SimpleNamespace(controller=SimpleNamespace(write_timeout_secs=1.0, heartbeat_timeout_secs=30.0))
    service = ControllerService(conf, _Raft(s), lambda addr: None, clock=lambda: clock[0])
    built = []

    def finish(views: list) -> list:
        built.append(views)
        return [(j["job_id"], j["state"], j["reason"]) for j in views]

    answer = service.list_jobs(finish=finish)
    assert service.list_jobs(finish=finish) is answer and len(built) == 1, "nothing changed: the answer kept"
    assert service.list_jobs(finish=finish, include_finished=True) == answer and len(built) == 2, "another question"
    assert service.list_jobs(users=["u"], finish=finish) == answer and len(built) == 3, "a filtered one is built"
    start(s, first, now=1000.0)
    changed = service.list_jobs(finish=finish)
    assert changed != answer and changed[0] == (first, "RUNNING", "None") and len(built) == 4
    clock[0] = 2000.0
    assert service.list_jobs(finish=finish) is changed and len(built) == 4, "no begin time passed: still the same"
    s.apply(rec("job_hold", job_id=second, reason="JobHeldUser"))
    assert service.list_jobs(finish=finish) != changed and len(built) == 5, "a record applied: listed again"
    assert second in {job_id for job_id, _state, _reason in changed}
