"""The database's copy of the association store (accounts, users, QOS, associations: schema 5).

The controllers' replicated store (controller/associations.py) is the source of truth; the leader copies it
here whole, in one transaction, when it changed. The copy is small (Slurm sites hold thousands of associations,
not millions), so replacing every row is simpler and as cheap as a diff. spur_assoc_copies keeps the state's
applied-record count of each cluster's copy: a copy from a leader that has fallen behind (two leaders for a
moment during a change of leader) is refused instead of putting older rows over newer ones.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

# store table -> (database table, columns after cluster_id); jsonb columns hold TRES maps, text[] the lists.
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "qos": (
        "spur_qos",
        (
            "name",
            "id",
            "description",
            "priority",
            "preempt",
            "preempt_mode",
            "grp_tres",
            "grp_jobs",
            "grp_submit_jobs",
            "max_jobs_per_user",
            "max_submit_jobs_per_user",
            "max_wall_secs",
            "max_tres_per_job",
            "max_tres_per_user",
            "usage_factor",
            "flags",
        ),
    ),
    "accounts": ("spur_accounts", ("name", "description", "organization", "parent", "coordinators")),
    "users": ("spur_users", ("name", "default_account", "admin_level", "default_wckey")),
    "assocs": (
        "spur_associations",
        (
            "id",
            "account",
            "user",
            "partition",
            "parent_account",
            "shares",
            "grp_tres",
            "grp_jobs",
            "grp_submit_jobs",
            "max_jobs",
            "max_submit_jobs",
            "max_wall_secs",
            "max_tres_per_job",
            "qos",
            "default_qos",
            "priority",
        ),
    ),
}
_JSON = {"grp_tres", "max_tres_per_job", "max_tres_per_user"}


def _cell(column: str, value: Any) -> Any:
    return Jsonb(value or {}) if column in _JSON else list(value or []) if isinstance(value, list) else value


def write_store(conn: psycopg.Connection, cluster_id: str, applied: int, store: dict[str, Any]) -> bool:
    """Replace the cluster's copy with `store` (its four tables) as of `applied` records, in one transaction.
    False (nothing written) when the database already holds a copy at least that new. psycopg errors propagate."""
    with conn.transaction():
        row = conn.execute(
            "SELECT applied FROM spur_assoc_copies WHERE cluster_id = %s FOR UPDATE", (cluster_id,)
        ).fetchone()
        if row is not None and row[0] >= applied:
            return False
        for name, (table, columns) in TABLES.items():
            conn.execute(sql.SQL("DELETE FROM {} WHERE cluster_id = %s").format(sql.Identifier(table)), (cluster_id,))
            rows = [[cluster_id, *(_cell(c, r.get(c)) for c in columns)] for r in store[name].values()]
            if not rows:
                continue
            statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
                sql.Identifier(table),
                sql.SQL(", ").join(map(sql.Identifier, ("cluster_id", *columns))),
                sql.SQL(", ").join(sql.Placeholder() * (len(columns) + 1)),
            )
            with conn.cursor() as cur:
                cur.executemany(statement, rows)
        conn.execute(
            "INSERT INTO spur_assoc_copies (cluster_id, applied) VALUES (%s, %s) ON CONFLICT (cluster_id) "
            "DO UPDATE SET applied = EXCLUDED.applied, copied_at = now()",
            (cluster_id, applied),
        )
    return True


def read_store(conn: psycopg.Connection, cluster_id: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The cluster's copy as the store keeps it: {table: {key: row}} (keys as controller/associations.py's)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, (table, columns) in TABLES.items():
        query = sql.SQL("SELECT {} FROM {} WHERE cluster_id = %s").format(
            sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table)
        )
        rows = [dict(zip(columns, r, strict=True)) for r in conn.execute(query, (cluster_id,)).fetchall()]
        if name == "assocs":
            out[name] = {f"{r['account']}|{r['user']}|{r['partition']}": r for r in rows}
        else:
            out[name] = {r["name"]: r for r in rows}
    return out
