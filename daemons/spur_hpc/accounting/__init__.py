"""Job accounting in PostgreSQL: the leader's writer, schema migrations, and sacct's query.

connection.py  settings from spur.conf, connecting with the password from its 0600 file
migrations.py  numbered schema migrations under an advisory lock; roll forward only
records.py     a replicated job record -> one row and its monotonic version
writer.py      AccountingWriter: reconcile the replicated job table into the database
query.py       query_jobs(): sacct's selection rules
"""

from spur_hpc.accounting.connection import ConnectionSettings, connect, settings_from_config
from spur_hpc.accounting.errors import AccountingError, AccountingUnavailable, MigrationError, SchemaTooNewError
from spur_hpc.accounting.migrations import SCHEMA_VERSION, check_schema, migrate
from spur_hpc.accounting.query import InvalidQuery, clusters, query_jobs, sacct_window
from spur_hpc.accounting.records import record_version
from spur_hpc.accounting.writer import AccountingWriter

__all__ = [
    "SCHEMA_VERSION",
    "AccountingError",
    "AccountingUnavailable",
    "AccountingWriter",
    "ConnectionSettings",
    "InvalidQuery",
    "MigrationError",
    "SchemaTooNewError",
    "check_schema",
    "clusters",
    "connect",
    "migrate",
    "query_jobs",
    "record_version",
    "sacct_window",
    "settings_from_config",
]
