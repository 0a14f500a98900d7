"""The service's database: SQLAlchemy 2 models for batch jobs and the audit log, the engine built from
PROCTOR_DATABASE_URL, and Alembic migrations run at start-up (safe when several replicas start at once).

Nothing here is imported unless a job, the audit log or a migration is asked for.
"""
