"""The tables: batch jobs, their input rows, their per-row results, and the audit log of scores.

Timestamps that the job runner compares (leases) are epoch seconds in a float, so SQLite and PostgreSQL
compare them the same way; the audit log's time is a timezone-aware DateTime for people reading it in SQL.
The migrations in `migrations/versions` create exactly these tables; change both together.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

VERSION_TABLE = "proctor_alembic_version"
"""Where Alembic keeps the schema revision (not `alembic_version`, which a shared database may already use)."""

JOB_STATUSES = ("ingesting", "queued", "running", "done", "failed", "cancelled", "deleting")
"""Every status a job can have; queued and running are the unfinished ones; ingesting (its rows are being
stored) and deleting (the sweep is removing it) are never shown by the API."""

# SQLite makes only an INTEGER PRIMARY KEY an auto-incrementing row id; PostgreSQL gets a bigint.
_AuditId = BigInteger().with_variant(Integer(), "sqlite")


class Base(DeclarativeBase):
    """The declarative base of every Proctor table."""


class Job(Base):
    """One batch job: what to score, who owns it, how far it got, and which replica holds its lease."""

    __tablename__ = "proctor_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    owner: Mapped[str | None] = mapped_column(String(64))
    verifier: Mapped[str | None] = mapped_column(String(200))
    response_field: Mapped[str] = mapped_column(String(200))
    reference_field: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(1000))
    total: Mapped[int] = mapped_column(Integer)
    done: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(300))
    lease_expires: Mapped[float | None] = mapped_column(Float)
    claims: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class JobRow(Base):
    """One input row of a job, as JSON text: the job reads its rows from here, so any replica can run it."""

    __tablename__ = "proctor_job_rows"

    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("proctor_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    row_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[str] = mapped_column(Text)


class JobResult(Base):
    """The score of one row; the primary key (job_id, row_index) is what makes a retried chunk a no-op."""

    __tablename__ = "proctor_job_results"

    job_id: Mapped[str] = mapped_column(
        String(32), ForeignKey("proctor_jobs.id", ondelete="CASCADE"), primary_key=True
    )
    row_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(32))
    reward: Mapped[float | None] = mapped_column(Float)
    score: Mapped[str] = mapped_column(Text)


class AuditScore(Base):
    """One score the service answered: verifier name and version, status, reward, the caller's key hash, time."""

    __tablename__ = "proctor_audit_scores"
    __table_args__ = (Index("ix_proctor_audit_scores_verifier_at", "verifier", "at"),)

    id: Mapped[int] = mapped_column(_AuditId, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), index=True)
    verifier: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(32))
    reward: Mapped[float] = mapped_column(Float)
    cached: Mapped[bool] = mapped_column(Boolean)
    key_hash: Mapped[str | None] = mapped_column(String(64))
    request_id: Mapped[str | None] = mapped_column(String(200))
