"""Batch jobs (jobs, input rows, per-row results) and the audit log of scores.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the four tables."""
    op.create_table(
        "proctor_jobs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("verifier", sa.String(200), nullable=True),
        sa.Column("response_field", sa.String(200), nullable=False),
        sa.Column("reference_field", sa.String(200), nullable=False),
        sa.Column("source", sa.String(1000), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(300), nullable=True),
        sa.Column("lease_expires", sa.Float(), nullable=True),
        sa.Column("claims", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=True),
        sa.Column("finished_at", sa.Float(), nullable=True),
    )
    op.create_index("ix_proctor_jobs_status", "proctor_jobs", ["status"])
    op.create_table(
        "proctor_job_rows",
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("proctor_jobs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("row_index", sa.Integer(), primary_key=True),
        sa.Column("data", sa.Text(), nullable=False),
    )
    op.create_table(
        "proctor_job_results",
        sa.Column(
            "job_id", sa.String(32), sa.ForeignKey("proctor_jobs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("row_index", sa.Integer(), primary_key=True),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("score", sa.Text(), nullable=False),
    )
    op.create_table(
        "proctor_audit_scores",
        sa.Column(
            "id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verifier", sa.String(200), nullable=False),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("reward", sa.Float(), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=True),
        sa.Column("request_id", sa.String(200), nullable=True),
    )
    op.create_index("ix_proctor_audit_scores_at", "proctor_audit_scores", ["at"])
    op.create_index("ix_proctor_audit_scores_verifier_at", "proctor_audit_scores", ["verifier", "at"])


def downgrade() -> None:
    """Drop the four tables."""
    op.drop_table("proctor_audit_scores")
    op.drop_table("proctor_job_results")
    op.drop_table("proctor_job_rows")
    op.drop_table("proctor_jobs")
