"""Typed errors of the accounting package; every message is one line and never holds the password."""

from __future__ import annotations


class AccountingError(Exception):
    """Base of every accounting error."""


class AccountingUnavailable(AccountingError):
    """The database cannot be reached or the connection broke; retrying later may succeed."""


class SchemaTooNewError(AccountingError):
    """The database schema was written by a newer release: this one must not touch it (roll forward only)."""

    def __init__(self, database_version: int, known_version: int) -> None:
        self.database_version = database_version
        self.known_version = known_version
        super().__init__(
            f"the accounting database has schema version {database_version}, but this release knows only up to "
            f"version {known_version}; upgrade spurctld to a newer release (schemas roll forward only, never back)"
        )


class MigrationError(AccountingError):
    """A schema migration failed or could not take the migration lock; nothing of that migration was applied."""
