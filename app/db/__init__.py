"""The database, in layers that web code, the CLI and workers take only what they need of:

- app.db.base: the declarative base and column types the models are made of;
- app.db.engine: engines for Postgres and SQLite, and their sessions;
- app.db.statements: statements of the hot paths run straight on psycopg, and dialect-specific INSERTs;
- app.db.session: a web request's session behind the database gate (FastAPI).
"""
