"""The coordinator: watches attempts for timeouts and silence, applies retries, parks dead letters."""
