"""The runner's routing of OpenTelemetry's global API keeps a global SDK provider the agent set first (with
its exporters), and a span goes only to the attempt current where it started. Each case runs in a fresh
interpreter: the global provider can be set once per process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import json
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from voltbus.services.clients.agent.global_spans import route_global_spans
    from voltbus.services.clients.agent.otel import LogTracer

    exported = InMemorySpanExporter()
    own = TracerProvider()
    own.add_span_processor(SimpleSpanProcessor(exported))
    trace.set_tracer_provider(own)  # the agent's own, set before the runner routes
    assert route_global_spans() and route_global_spans()  # idempotent
    tracer, runner = trace.get_tracer("agent"), LogTracer(store=None)
    with runner.attempt("ro-1", "at-1"):
        with tracer.start_as_current_span("outer"):
            tracer.start_span("inner").end()
    with runner.attempt("ro-2", "at-2"):
        tracer.start_span("other").end()
    tracer.start_span("outside").end()
    runner._drain()
    recorded = {rid: sorted(s.name for _, s in spans) for rid, spans in runner.pending.items()}
    print(json.dumps({"recorded": recorded, "exported": sorted(s.name for s in exported.get_finished_spans())}))
    """
)


def test_an_sdk_provider_the_agent_set_keeps_its_exporters_and_the_attempts_get_their_spans() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["recorded"] == {"ro-1": ["inner", "outer"], "ro-2": ["other"]}
    assert out["exported"] == ["inner", "other", "outer", "outside"]
