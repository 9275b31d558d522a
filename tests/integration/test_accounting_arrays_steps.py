"""Accounting of array tasks, job steps and the spec fields sacct shows, against a real PostgreSQL."""

from __future__ import annotations

import pg
from pg import Database
from spur_hpc.accounting import AccountingWriter, connect, migrate, query_jobs
from spur_hpc.accounting.connection import ConnectionSettings
from spur_hpc.accounting.migrations import MIGRATIONS

pg_server, pg_database = pg.pg_server, pg.pg_database  # pytest fixtures, bound by name

CLUSTER = "11111111-aaaa-4bbb-8ccc-000000000001"
T0 = 1_700_000_000.0


def job(job_id: int, state: str = "PENDING", attempt: int = 0, **fields: object) -> dict:
    record = {
        "job_id": job_id,
        "spec": {
            "name": f"job{job_id}",
            "user": "alice",
            "uid": 1000,
            "nodes": 1,
            "tasks": 1,
            "cpus_per_task": 2,
            "work_dir": "/home/alice",
        },
        "state": state,
        "reason": "None",
        "exit_code": 0,
        "signal": 0,
        "submit_time": T0 + job_id,
        "start_time": 0.0 if state == "PENDING" else T0 + job_id + 10,
        "end_time": 0.0 if state in ("PENDING", "RUNNING") else T0 + job_id + 100,
        "nodes": [] if state == "PENDING" else ["node1", "node2"],
        "attempt": attempt,
    }
    record.update(fields)
    return record


def step(step_id: str, state: str, attempt: int = 1, **fields: object) -> dict:
    record = {
        "step_id": step_id,
        "name": "python3",
        "state": state,
        "nodes": ["node1", "node2"],
        "tasks": 4,
        "cpus_per_task": 1,
        "exit_code": 0,
        "signal": 0,
        "start_time": T0 + 20,
        "end_time": 0.0 if state == "RUNNING" else T0 + 30,
        "attempt": attempt,
    }
    record.update(fields)
    return record


def writer_for(db: Database) -> AccountingWriter:
    return AccountingWriter(db.url, db.password, CLUSTER, retry_interval_secs=0)


def query(db: Database, **filters: object) -> list[dict]:
    with connect(ConnectionSettings(url=db.url, password=db.password)) as conn:
        return query_jobs(conn, cluster_id=CLUSTER, now=T0 + 10_000, **filters)


def step_rows(db: Database) -> list[tuple]:
    with db.admin_connect() as conn:
        return conn.execute(
            "SELECT job_id, step_id, state, exit_code, nodes, tasks FROM spur_steps ORDER BY job_id, step_id"
        ).fetchall()


def test_a_started_batch_job_has_a_batch_step_that_ends_as_slurm_shows_it(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    writer.reconcile(
        [
            job(1),
            job(2, "RUNNING", 1),
            job(3, "FAILED", 1, exit_code=3),
            job(4, "TIMEOUT", 1),
            job(5, "OUT_OF_MEMORY", 1),
            job(6, "COMPLETED", 1, spec={"interactive": True}),
        ]
    )
    assert step_rows(pg_database) == [
        (2, "batch", "RUNNING", 0, "node1", 1),  # on the first node only
        (3, "batch", "FAILED", 3, "node1", 1),
        (4, "batch", "CANCELLED", 0, "node1", 1),  # the batch shell of a timed-out job is killed
        (5, "batch", "OUT_OF_MEMORY", 0, "node1", 1),
    ]  # a pending job has none, and neither has an interactive allocation
    writer.reconcile([job(2, "COMPLETED", 1)])
    assert step_rows(pg_database)[0][2] == "COMPLETED"


def test_steps_are_written_as_they_change_and_purge_waits_for_them(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    running = job(7, "RUNNING", 1, steps={"0": step("0", "RUNNING")})
    writer.reconcile([running])
    assert step_rows(pg_database) == [(7, "0", "RUNNING", 0, "node1,node2", 4), (7, "batch", "RUNNING", 0, "node1", 1)]
    # The job's own row does not change while its step does: the step's row still follows.
    assert writer.reconcile([job(7, "RUNNING", 1, steps={"0": step("0", "FAILED", exit_code=2)})]) == 0
    assert step_rows(pg_database)[0][2:4] == ("FAILED", 2)
    done = job(7, "COMPLETED", 1, steps={"0": step("0", "FAILED", exit_code=2), "1": step("1", "COMPLETED")})
    assert writer.recorded_job_ids_before([done], before=T0 + 10_000) == set()  # step 1 is not stored yet
    writer.reconcile([done])
    assert writer.recorded_job_ids_before([done], before=T0 + 10_000) == {7}
    # A new leader reads back what is stored and writes nothing again.
    assert writer_for(pg_database).reconcile([done]) == 0 and len(step_rows(pg_database)) == 3
    (record,) = query(pg_database, job_ids=[7])
    assert list(record["steps"]) == ["batch", "0", "1"]
    assert record["steps"]["0"] == {
        "step_id": "0",
        "attempt": 1,
        "name": "python3",
        "state": "FAILED",
        "exit_code": 2,
        "signal": 0,
        "nodes": ["node1", "node2"],
        "tasks": 4,
        "cpus_per_task": 1,
        "start_time": T0 + 20,
        "end_time": T0 + 30,
    }


def test_a_requeued_job_shows_only_the_steps_of_its_latest_attempt(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    writer.reconcile([job(8, "RUNNING", 1, steps={"0": step("0", "RUNNING")})])
    writer.reconcile([job(8, "RUNNING", 2)])
    earlier, record = query(pg_database, job_ids=[8])  # the first run is kept as a REQUEUED record
    assert (earlier["state"], earlier["attempt"], list(earlier["steps"])) == ("REQUEUED", 1, ["0"])
    assert list(record["steps"]) == ["batch"] and record["steps"]["batch"]["attempt"] == 2


def test_an_arrays_tasks_are_selected_by_the_arrays_id(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    array = {"array": "0-3"}
    parent = job(10, spec={**job(10)["spec"], **array}, array_job_id=10, array_pending="2-3", array_max_running=0)
    tasks = [
        job(11, "COMPLETED", 1, spec={**job(11)["spec"], **array}, array_job_id=10, array_task_id=0),
        job(12, "RUNNING", 1, spec={**job(12)["spec"], **array}, array_job_id=10, array_task_id=1),
    ]
    writer.reconcile([parent, *tasks, job(13, "COMPLETED", 1)])
    found = query(pg_database, job_ids=[10])
    assert [(r["job_id"], r["array_job_id"], r["array_task_id"], r["array_pending"]) for r in found] == [
        (10, 10, 0, "2-3"),
        (11, 10, 0, ""),
        (12, 10, 1, ""),
    ]
    assert [r["job_id"] for r in query(pg_database, job_ids=[12])] == [12]  # a task by its own id
    with pg_database.admin_connect() as conn:
        (task_id,) = conn.execute("SELECT array_task_id FROM spur_jobs WHERE job_id = 10").fetchone()
    assert task_id is None  # the array's record stands for its pending tasks, not for task 0


def test_an_arrays_pending_range_follows_the_tasks_split_off(pg_database: Database) -> None:
    # The array's record stays PENDING (the same record version) while tasks split off.
    writer = writer_for(pg_database)
    spec = {**job(20)["spec"], "array": "0-3"}
    writer.reconcile([job(20, spec=spec, array_job_id=20, array_pending="0-3")])
    writer.reconcile([job(20, spec=spec, array_job_id=20, array_pending="2-3")])
    assert query(pg_database, job_ids=[20])[0]["array_pending"] == "2-3"
    # A stale leader that still sees more tasks pending cannot put them back.
    writer_for(pg_database).reconcile([job(20, spec=spec, array_job_id=20, array_pending="1-3")])
    assert query(pg_database, job_ids=[20])[0]["array_pending"] == "2-3"
    # The last task runs in the array's own record.
    writer.reconcile([job(20, "COMPLETED", 1, spec=spec, array_job_id=20, array_task_id=3, array_pending="")])
    (record,) = query(pg_database, job_ids=[20])
    assert (record["state"], record["array_task_id"], record["array_pending"]) == ("COMPLETED", 3, "")


def test_sacct_fields_of_the_spec_are_stored_and_names_select(pg_database: Database) -> None:
    spec = {
        **job(30)["spec"],
        "name": "2f0c-uuid",
        "comment": "rule_a",
        "wckey": "submitit",
        "qos": "normal",
        "constraint": "avx2&ib",
        "nodelist": "node[1-2]",
        "exclude": "node3",
        "stdout_path": "/tmp/%j.out",
    }
    writer_for(pg_database).reconcile(
        [
            job(30, "DEADLINE", 1, spec=spec, restart_count=2, eligible_time=T0 + 31),
            job(31, "COMPLETED", 1),
            job(32, "OUT_OF_MEMORY", 1),
        ]
    )
    (record,) = query(pg_database, names=["2f0c-uuid"], start=T0)
    assert record["job_id"] == 30 and record["state"] == "DEADLINE"
    for key in ("comment", "wckey", "qos", "constraint", "nodelist", "exclude", "stdout_path"):
        assert record["spec"][key] == spec[key], key
    assert (record["restart_count"], record["eligible_time"]) == (2, T0 + 31)
    window = {"start": T0, "end": T0 + 1000}
    assert [r["job_id"] for r in query(pg_database, states=["DL"], **window)] == [30]
    assert [r["job_id"] for r in query(pg_database, states=["OOM", "CD"], **window)] == [31, 32]


def test_a_previous_release_keeps_writing_its_columns_after_the_migration(pg_database: Database) -> None:
    settings = ConnectionSettings(url=pg_database.url, password=pg_database.password)
    with connect(settings) as old:
        migrate(old, MIGRATIONS[:1])  # the previous release's schema
        old_columns = "cluster_id, job_id, attempt, record_version, state, submit_time"
        old.execute(
            f"INSERT INTO spur_jobs ({old_columns}) VALUES (%s, 40, 0, 1, 'PENDING', to_timestamp(%s))", (CLUSTER, T0)
        )
        with connect(settings) as new:
            migrate(new)  # the first upgraded controller, while the old leader's connection stays open
        # The old leader goes on writing what it knows, on its open connection.
        old.execute(
            f"INSERT INTO spur_jobs ({old_columns}) VALUES (%s, 41, 0, 1, 'PENDING', to_timestamp(%s))", (CLUSTER, T0)
        )
        old.execute("UPDATE spur_jobs SET state = 'RUNNING', record_version = 10 WHERE job_id = 40")
    found = {r["job_id"]: r for r in query(pg_database, job_ids=[40, 41])}
    assert found[40]["state"] == "RUNNING" and found[41]["array_job_id"] == 0 and found[41]["steps"] == {}
    # The upgraded leader then writes over the old release's rows as usual.
    writer_for(pg_database).reconcile([job(40, "COMPLETED", 1)])
    assert query(pg_database, job_ids=[40])[0]["steps"]["batch"]["state"] == "COMPLETED"


# ---------------------------------------------------------------------- records made by the state machine


def test_records_of_the_state_machine_reach_sacct_with_their_array_tasks_and_steps(pg_database: Database) -> None:
    """The replicated records themselves (controller/state.py, copied as the leader's accounting loop copies
    them), not hand-made ones: an array split task by task, and a job with an srun step over two nodes."""
    from spur_hpc.controller import wal
    from spur_hpc.controller.accounting_link import _job_copy
    from spur_hpc.controller.scheduler import plan_starts
    from spur_hpc.controller.state import ClusterState

    def rec(op: str, **kw: object) -> dict:
        return wal.make_record(op, **kw)

    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id=CLUSTER, members=["a:1"], wal_level=3))
    for name in ("n1", "n2"):
        s.apply(
            rec(
                "node_register", name=name, address=f"{name}:1", cpus=2, memory_mb=100, version="1", build="b",
                partition="default", running=[], time=T0,
            )
        )  # fmt: skip
    base = {"script": "#!/bin/sh\n", "user": "alice", "uid": 1000, "gid": 1000, "work_dir": "/tmp", "nodes": 1,
            "tasks": 1, "cpus_per_task": 1, "memory_mb": 0, "time_limit_secs": 0, "partition": "default"}  # fmt: skip
    steps_job = s.apply(rec("job_submit", spec={**base, "name": "steps", "nodes": 2, "tasks": 4}, key="", time=T0))
    array = s.apply(rec("job_submit", spec={**base, "name": "arr", "array": "0-2%2"}, key="", time=T0))
    steps_id, array_id = steps_job["job_id"], array["job_id"]
    writer = writer_for(pg_database)

    def start_planned(now: float) -> None:
        for job_id, nodes in plan_starts(s, now):
            job = s.jobs[job_id]
            op = "job_array_split" if job.get("array_pending") else "job_start"
            assert s.apply(rec(op, job_id=job_id, nodes=nodes, attempt=job["attempt"] + 1, time=now))["ok"]

    def end(job_id: int, now: float, state: str = "COMPLETED", code: int = 0) -> None:
        job = s.jobs[job_id]
        s.apply(rec("job_end", job_id=job_id, attempt=job["attempt"], state=state, exit_code=code, signal=0,
                    time=now, reason=""))  # fmt: skip

    def sync() -> dict[int, dict]:
        writer.reconcile([_job_copy(job) for job in s.jobs.values()])
        return {r["job_id"]: r for r in query(pg_database, job_ids=[steps_id, array_id])}

    start_planned(T0 + 1)
    assert s.jobs[steps_id]["state"] == "RUNNING"
    created = s.apply(
        rec("step_create", job_id=steps_id, attempt=1, name="python3", cpus_per_task=1,
            layout={"n1": [0, 1], "n2": [2, 3]}, spec={"argv": ["python3"], "io_token": "secret"}, time=T0 + 2)
    )  # fmt: skip
    assert created["ok"], created
    end(steps_id, T0 + 3)  # frees both nodes: two array tasks start (the %2 throttle)
    start_planned(T0 + 4)
    rows = sync()
    assert rows[array_id]["array_pending"] == "2" and rows[array_id]["array_max_running"] == 2
    split_off = [r for r in rows.values() if r["array_job_id"] == array_id and r["job_id"] != array_id]
    tasks = sorted((r["array_task_id"], r["state"]) for r in split_off)
    assert tasks == [(0, "RUNNING"), (1, "RUNNING")]
    steps = rows[steps_id]["steps"]
    assert list(steps) == ["batch", "0"] and steps["batch"]["state"] == "COMPLETED"
    assert steps["0"]["nodes"] == ["n1", "n2"] and steps["0"]["tasks"] == 4
    for node, code in (("n1", 0), ("n2", 5)):
        s.apply(rec("step_end", job_id=steps_id, attempt=1, step_id="0", node=node, state="COMPLETED" if not code
                    else "FAILED", exit_code=code, signal=0, time=T0 + 5, reason=""))  # fmt: skip
    for task in split_off:
        end(task["job_id"], T0 + 6)
    start_planned(T0 + 7)  # the last task runs in the array's own record
    end(array_id, T0 + 8, "FAILED", 1)
    rows = sync()
    assert (rows[array_id]["array_task_id"], rows[array_id]["array_pending"], rows[array_id]["state"]) == (
        2, "", "FAILED")  # fmt: skip
    assert (rows[steps_id]["steps"]["0"]["state"], rows[steps_id]["steps"]["0"]["exit_code"]) == ("FAILED", 5)
    assert rows[array_id]["steps"]["batch"]["exit_code"] == 1
    with pg_database.admin_connect() as conn:
        stored = conn.execute("SELECT count(*) FROM spur_steps WHERE cluster_id = %s", (CLUSTER,)).fetchone()[0]
    assert stored == 2 + 3  # the steps job's batch and 0, a batch step per array task
    assert writer.recorded_job_ids_before([_job_copy(j) for j in s.jobs.values()], T0 + 100) == set(s.jobs)


def test_an_update_of_a_pending_job_reaches_its_row(pg_database: Database) -> None:
    writer = writer_for(pg_database)
    writer.reconcile([job(50)])
    renamed = job(50, spec={**job(50)["spec"], "name": "renamed", "time_limit_secs": 600}, spec_rev=1)
    writer.reconcile([renamed])  # scontrol update: still PENDING, the same record version
    (record,) = query(pg_database, job_ids=[50])
    assert (record["spec"]["name"], record["spec"]["time_limit_secs"]) == ("renamed", 600)
    writer_for(pg_database).reconcile([job(50)])  # a stale leader's older spec does not come back
    assert query(pg_database, job_ids=[50])[0]["spec"]["name"] == "renamed"


def test_the_leaders_copy_leaves_jobs_that_may_not_start_out_of_sacct_and_gives_a_job_without_mem_a_node(
    pg_database: Database,
) -> None:
    """As slurmdbd records them: a held job, one waiting on a dependency and an array's throttled rest have no
    eligible time (plain sacct leaves them out, sacct -j lists them); a job without --mem asks for a node's memory."""
    from spur_hpc.controller import wal
    from spur_hpc.controller.accounting_link import _Facts, _job_copy
    from spur_hpc.controller.scheduler import plan_starts
    from spur_hpc.controller.state import ClusterState

    def rec(op: str, **kw: object) -> dict:
        return wal.make_record(op, **kw)

    now = T0 + 5
    s = ClusterState()
    s.apply(rec("cluster_init", name="c", cluster_id=CLUSTER, members=["a:1"], wal_level=3))
    s.apply(rec("node_register", name="n1", address="n1:1", cpus=2, memory_mb=3072, version="1", build="b",
                partition="default", running=[], time=now))  # fmt: skip
    base = {"script": "#!/bin/sh\n", "user": "alice", "uid": 1000, "gid": 1000, "work_dir": "/tmp", "nodes": 1,
            "tasks": 1, "cpus_per_task": 1, "memory_mb": 0, "time_limit_secs": 0, "partition": "default"}  # fmt: skip

    def submit(**spec: object) -> int:
        return s.apply(rec("job_submit", spec={**base, **spec}, key="", time=now))["job_id"]

    running = submit(name="run")
    array = submit(name="arr", array="0-3%1")
    held = submit(name="held", hold=True)
    dep = submit(name="dep", dependency=f"afterok:{running}")
    submit(name="wait", memory_mb=512)
    gone = submit(name="gone", hold=True)  # cancelled while held, before any pass saw it waiting
    assert s.apply(rec("job_cancel", job_id=gone, by="root", time=now))["ok"]
    for job_id, nodes in plan_starts(s, now):
        job = s.jobs[job_id]
        op = "job_array_split" if job.get("array_pending") else "job_start"
        assert s.apply(rec(op, job_id=job_id, nodes=nodes, attempt=job["attempt"] + 1, time=now))["ok"]
    assert s.jobs[running]["state"] == "RUNNING" and s.jobs[array]["array_pending"] == "1-3"
    writer = writer_for(pg_database)
    writer.reconcile([_job_copy(job, s, _Facts(now, {}, None)) for job in s.jobs.values()])
    listed = {r["spec"]["name"]: r for r in query(pg_database, start=T0)}
    assert sorted(listed) == ["arr", "run", "wait"]  # the array's running task 0 (under its own id), not its rest
    assert [r["array_pending"] for r in listed.values() if r["spec"]["name"] == "arr"] == [""]
    by_id = {r["spec"]["name"] for r in query(pg_database, job_ids=[array, held, dep, gone])}
    assert by_id == {"arr", "held", "dep", "gone"}
    assert (listed["run"]["spec"]["memory_mb"], listed["wait"]["spec"]["memory_mb"]) == (3072, 512)
