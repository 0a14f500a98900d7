"""SQL verifier `sql`: execution match against a gold query on read-only SQLite or PostgreSQL."""

from proctor.verifiers.sql import verifier  # noqa: F401
