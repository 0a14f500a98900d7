"""SQL verifier `sql`: execution match against a gold query on read-only SQLite or PostgreSQL (`verifier`
registers it when imported)."""
