"""What agent code records: the span vocabulary (semconv, attributes), the active tracer, the emitters
and operations. No I/O and no store: the store and the agent runtime build on it."""
