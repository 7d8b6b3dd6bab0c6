"""The projector service: keeps the DuckDB read models current and serves read-only SQL over HTTP."""
