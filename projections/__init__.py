"""Read models: DuckDB tables rebuilt from the log, as SQL files, row mapping and the training-data adapter (the
projector that writes them is ``services/projector``)."""
