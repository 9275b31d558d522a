"""sacct's data source: job records selected the way Slurm's sacct selects them.

Time window (-S start, -E end), as slurmdbd computes it (the window is [S, E)):

- without -s: S defaults to midnight today, or to the epoch when job ids are given; E defaults to now.
  A job is selected when it was eligible before E and had not ended before S. A job that never became
  eligible (held, waiting on a dependency, its --begin or its array's throttle: eligible_time 'infinity', as
  slurmdbd's INFINITE) is in no window; job ids given without -S select such jobs too.
- with -s: S defaults to now (the epoch when job ids are given) and E to S, so `sacct -s R` means "running
  now". A state matches when the job was in it during the window: PENDING when it was waiting at some
  point of the window, RUNNING when it ran during it, a finished state when the job ended in the window
  in that state.
- E is moved one second later when it equals S or now, so the current second is included.

Job ids select a job by its own id or by its array's (sacct -j 12 lists every task of array 12). Each record
carries its steps (spur_steps rows of the job's latest attempt) under "steps", as the replicated job does. A
requeued job's earlier runs (spur_job_runs, state REQUEUED, no steps) come before its latest record; sacct
without -D keeps the latest run each job has in the window.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from spur_hpc.accounting.errors import AccountingError, AccountingUnavailable
from spur_hpc.model import FINISHED_STATES, JOB_STATE_CODES, JOB_STATES, NO_REASON, PENDING, RUNNING

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# An earlier run of a requeued job (spur_job_runs): a state of accounting records only, as in slurmdbd.
REQUEUED = "REQUEUED"
# sacct -s accepts long names and the short forms, in any case.
STATE_NAMES = {
    **{code: state for state, code in JOB_STATE_CODES.items()},
    **{s: s for s in JOB_STATES},
    "RQ": REQUEUED,
    REQUEUED: REQUEUED,
}

_RESULT_COLUMNS = (
    'cluster_id, job_id, attempt, name, "user", uid, gid, account, partition, state, reason, exit_code, signal, '
    "submit_time, start_time, end_time, nodes, cpus, req_nodes, tasks, cpus_per_task, memory_mb, time_limit_secs, "
    'work_dir, updated_at, array_job_id, array_task_id, array_pending, array_max_running, "comment", wckey, qos, '
    "constraints, req_nodelist, exc_nodelist, restart_count, "
    "CASE WHEN eligible_time = 'infinity' THEN NULL ELSE eligible_time END AS eligible_time, std_out, std_err, "
    "cancelled_by_uid"
)
# When a job became eligible; a row of a release before this one may have none: its submission stands in.
_ELIGIBLE = "COALESCE(eligible_time, submit_time)"
_STEP_RESULT_COLUMNS = (
    "job_id, step_id, attempt, name, state, exit_code, signal, nodes, tasks, cpus_per_task, start_time, end_time"
)
# Row columns that belong in the record's "spec", as in the replicated job (controller/state.py).
_SPEC_COLUMNS = {
    "name": "name",
    "user": "user",
    "uid": "uid",
    "gid": "gid",
    "account": "account",
    "partition": "partition",
    "req_nodes": "nodes",
    "tasks": "tasks",
    "cpus_per_task": "cpus_per_task",
    "memory_mb": "memory_mb",
    "time_limit_secs": "time_limit_secs",
    "work_dir": "work_dir",
    "comment": "comment",
    "wckey": "wckey",
    "qos": "qos",
    "constraints": "constraint",
    "req_nodelist": "nodelist",
    "exc_nodelist": "exclude",
    "std_out": "stdout_path",
    "std_err": "stderr_path",
}


class InvalidQuery(AccountingError, ValueError):
    """A query argument sacct would reject (an unknown state, an end before the start)."""


TimeArg = datetime | float | int | None


def normalize_states(states: Iterable[str]) -> list[str]:
    """sacct -s values (long names or PD/R/CD/F/CA/TO/NF, any case) -> state names; InvalidQuery otherwise."""
    names = []
    for raw in states:
        name = STATE_NAMES.get(raw.strip().upper())
        if name is None:
            known = ", ".join(sorted(STATE_NAMES))
            raise InvalidQuery(f"unknown job state {raw!r}; use one of {known}")
        if name not in names:
            names.append(name)
    return names


def _as_datetime(value: TimeArg) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        # A naive time is local time, as sacct reads -S/-E.
        return value if value.tzinfo else value.astimezone()
    return datetime.fromtimestamp(float(value), tz=UTC)


def sacct_window(
    start: TimeArg = None,
    end: TimeArg = None,
    *,
    job_ids: Iterable[int] = (),
    states: Iterable[str] = (),
    now: TimeArg = None,
) -> tuple[datetime, datetime]:
    """(S, E) with sacct's defaults applied; the query selects within [S, E)."""
    current = (_as_datetime(now) or datetime.now(UTC)).replace(microsecond=0)
    has_ids, has_states = bool(list(job_ids)), bool(list(states))
    s, e = _as_datetime(start), _as_datetime(end)
    if has_states:
        if s is None and not has_ids:
            s = current
        if s is not None and e is None:
            e = s
    elif s is None and not has_ids:
        s = current.astimezone().replace(hour=0, minute=0, second=0)  # midnight, local time
    s = s or EPOCH
    e = e or current
    if e == s or e == current:
        e = e + timedelta(seconds=1)
    if e < s:
        raise InvalidQuery(f"the end time {e.isoformat()} is before the start time {s.isoformat()}")
    return s, e


def _state_condition(state: str, s: datetime, e: datetime) -> tuple[sql.Composable, list[Any]]:
    if state == PENDING:
        # Waiting at some point of the window: eligible before E, and still waiting at S or later.
        return sql.SQL(
            f"({_ELIGIBLE} < %s AND ("
            "(start_time IS NOT NULL AND start_time > %s)"
            " OR (start_time IS NULL AND end_time IS NOT NULL AND end_time > %s)"
            " OR (start_time IS NULL AND end_time IS NULL AND state = %s)))"
        ), [e, s, s, PENDING]
    if state == RUNNING:
        return sql.SQL(
            "(start_time IS NOT NULL AND start_time < %s AND (end_time > %s OR (end_time IS NULL AND state = %s)))"
        ), [e, s, RUNNING]
    if state in FINISHED_STATES or state == REQUEUED:
        return sql.SQL("(state = %s AND end_time IS NOT NULL AND end_time >= %s AND end_time <= %s)"), [state, s, e]
    raise InvalidQuery(f"unknown job state {state!r}")


def query_jobs(
    conn: psycopg.Connection,
    cluster_id: str | None = None,
    job_ids: Iterable[int] = (),
    users: Iterable[str] = (),
    start: TimeArg = None,
    end: TimeArg = None,
    states: Iterable[str] = (),
    *,
    names: Iterable[str] = (),
    now: TimeArg = None,
) -> list[dict[str, Any]]:
    """Job records as sacct selects them, ordered by job id (then cluster, then submit time).

    Each record has the shape of a replicated job (controller/state.py), so the code that turns a live
    job into a Job message serves sacct too: job_id, spec{name, user, uid, gid, account, partition, nodes,
    tasks, cpus_per_task, memory_mb, time_limit_secs, work_dir}, state, reason, exit_code, signal,
    submit_time/start_time/end_time (epoch seconds, 0.0 when not yet), nodes (list), attempt,
    cancel_requested (False), array_job_id, array_task_id, array_pending, array_max_running, restart_count,
    eligible_time, cancelled_by_uid, steps {step_id: step record}; plus cluster_id, cpus (allocated) and updated_at.
    cluster_id None means every cluster in the database. A job id selects that job and, when it is an array's
    id, every task of the array; names select by job name.
    """
    ids = [int(j) for j in job_ids]
    wanted_users = [str(u) for u in users]
    wanted_names = [str(n) for n in names]
    wanted_states = normalize_states(states)
    s, e = sacct_window(start, end, job_ids=ids, states=wanted_states, now=now)

    conditions: list[sql.Composable] = []
    params: list[Any] = []
    if cluster_id is not None:
        conditions.append(sql.SQL("cluster_id = %s"))
        params.append(cluster_id)
    if ids:
        conditions.append(
            sql.SQL("(job_id = ANY(%s::bigint[]) OR (array_job_id <> 0 AND array_job_id = ANY(%s::bigint[])))")
        )
        params.extend([ids, ids])
    if wanted_users:
        conditions.append(sql.SQL('"user" = ANY(%s::text[])'))
        params.append(wanted_users)
    if wanted_names:
        conditions.append(sql.SQL("name = ANY(%s::text[])"))
        params.append(wanted_names)
    if wanted_states:
        parts = []
        for state in wanted_states:
            condition, values = _state_condition(state, s, e)
            parts.append(condition)
            params.extend(values)
        conditions.append(sql.SQL("({})").format(sql.SQL(" OR ").join(parts)))
    elif ids and start is None:
        # Job ids without -S: every record of those jobs up to E, eligible or not (slurmdbd sets no window).
        conditions.append(sql.SQL("(submit_time <= %s AND (end_time >= %s OR end_time IS NULL))"))
        params.extend([e, s])
    else:
        conditions.append(
            sql.SQL(f"({_ELIGIBLE} < %s AND (end_time >= %s OR end_time IS NULL))")
        )
        params.extend([e, s])

    # A requeued job's earlier runs (spur_job_runs, REQUEUED) are selected by the same rules, listed before it.
    where = sql.SQL(" AND ").join(conditions)
    query = sql.SQL(
        "SELECT {cols} FROM spur_jobs WHERE {where} UNION ALL SELECT {cols} FROM spur_job_runs WHERE {where} "
        "ORDER BY job_id, cluster_id, submit_time, attempt"
    ).format(cols=sql.SQL(_RESULT_COLUMNS), where=where)
    params = params + params
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(query, params).fetchall()
            steps = _steps_of(cur, rows)
    except psycopg.errors.UndefinedTable:
        raise AccountingError(
            "the accounting database has no job table yet; spurctld creates it when it first connects"
        ) from None
    except psycopg.Error as exc:
        if conn.broken or conn.closed:
            raise AccountingUnavailable(f"accounting database connection lost: {type(exc).__name__}") from None
        raise
    records = [_as_record(row) for row in rows]
    for record in records:
        record["steps"] = {
            step["step_id"]: step
            for step in steps.get((record["cluster_id"], record["job_id"]), [])
            if step["attempt"] == record["attempt"]  # a requeued job's earlier steps are not its current ones
        }
    return records


def _steps_of(cur: psycopg.Cursor, rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The step rows of these jobs, by (cluster_id, job_id), in step order (batch first, then 0, 1, ...)."""
    if not rows:
        return {}
    found = cur.execute(
        sql.SQL(
            "SELECT cluster_id, {cols} FROM spur_steps WHERE (cluster_id, job_id) IN "
            "(SELECT * FROM unnest(%s::text[], %s::bigint[]))"
        ).format(cols=sql.SQL(_STEP_RESULT_COLUMNS)),
        ([r["cluster_id"] for r in rows], [r["job_id"] for r in rows]),
    ).fetchall()
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for step in sorted(found, key=lambda s: (s["step_id"] != "batch", _step_number(s["step_id"]), s["step_id"])):
        key = (step.pop("cluster_id"), step["job_id"])
        step.pop("job_id")
        step["nodes"] = [n for n in (step["nodes"] or "").split(",") if n]
        step["start_time"], step["end_time"] = _epoch(step["start_time"]), _epoch(step["end_time"])
        out.setdefault(key, []).append(step)
    return out


def _step_number(step_id: str) -> int:
    return int(step_id) if step_id.isdigit() else -1


def _epoch(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


def _as_record(row: dict[str, Any]) -> dict[str, Any]:
    spec = {key: row[column] for column, key in _SPEC_COLUMNS.items()}
    spec["uid"] = spec["uid"] or 0
    spec["gid"] = spec["gid"] or 0
    spec["memory_mb"] = spec["memory_mb"] or 0
    return {
        "cluster_id": row["cluster_id"],
        "job_id": row["job_id"],
        "spec": spec,
        "state": row["state"],
        "reason": row["reason"] or NO_REASON,
        "exit_code": row["exit_code"],
        "signal": row["signal"],
        "submit_time": _epoch(row["submit_time"]),
        "start_time": _epoch(row["start_time"]),
        "end_time": _epoch(row["end_time"]),
        "nodes": [n for n in (row["nodes"] or "").split(",") if n],
        "attempt": row["attempt"],
        "cancel_requested": False,  # not recorded: a finished job's state already says how it ended
        "cpus": row["cpus"] or 0,
        "updated_at": _epoch(row["updated_at"]),
        "array_job_id": row["array_job_id"] or 0,
        "array_task_id": row["array_task_id"] or 0,
        "array_pending": row["array_pending"] or "",
        "array_max_running": row["array_max_running"] or 0,
        "restart_count": row["restart_count"] or 0,
        "eligible_time": _epoch(row["eligible_time"]),
        "cancelled_by_uid": row["cancelled_by_uid"],
    }


def clusters(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """Every cluster that ever wrote job records: cluster_id, name, first_seen, last_seen (epoch seconds).

    sacct -M takes cluster names; a name can map to several ids when a cluster was bootstrapped again.
    """
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "SELECT cluster_id, name, first_seen, last_seen FROM spur_clusters ORDER BY first_seen"
        ).fetchall()
    return [{**row, "first_seen": _epoch(row["first_seen"]), "last_seen": _epoch(row["last_seen"])} for row in rows]
