"""The agent runtime the runner hosts: LitAgent and the decorators, and the tracer that ships an agent's
spans to the store (``LogTracer``, OpenAI instrumentation)."""
