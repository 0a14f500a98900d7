"""`tool.sql_explore`: explore a SQLite database with a read-only `sql` tool, then answer with one query."""

from __future__ import annotations
