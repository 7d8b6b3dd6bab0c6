"""Read models: DuckDB tables rebuilt from the log, as SQL files plus one projector."""
