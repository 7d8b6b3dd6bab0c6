"""Spans made with OpenTelemetry's global API inside an agent (``trace.get_tracer(...)``, as OpenLLMetry,
OpenInference and Agent Lightning's own agents make them) reach their attempt's record with their parents,
in each place an agent runs; concurrent rollouts keep their own spans; spans outside attempts go nowhere."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace

from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import runner_settings
from .test_runner import AGENTS, run_until_done, telemetry


@pytest.mark.parametrize(
    ("where", "together"), [("in-process", 3), ("host", 3), ("isolate", 1)], ids=["in-process", "agent host", "isolate"]
)
async def test_global_api_spans_reach_their_attempt_with_their_parents(
    store: Store, nats_settings: NatsSettings, where: str, together: int
) -> None:
    group = uuid.uuid4().hex
    tasks = [{"question": f"q{i}", "group": group, "together": together} for i in range(3)]
    rollouts = [await store.enqueue_rollout(t) for t in tasks]
    mode = {"isolate": True} if where == "isolate" else {"agents": where}
    settings = runner_settings(nats_settings, slots=3, **mode)
    finished = await run_until_done(
        settings, f"{AGENTS}:global_otel_agent", store, [r.rollout_id for r in rollouts], timeout=60
    )
    trace.get_tracer("test").start_span("outside").end()  # this process, no attempt: recorded nowhere

    assert [r.status for r in finished] == ["succeeded"] * 3, [r.attempt.error for r in finished]
    attempts = {r.rollout_id: r.attempt.attempt_id for r in finished}
    for rollout, task in zip(rollouts, tasks, strict=True):
        spans, _ = await telemetry(store, rollout.rollout_id)
        by_name = {s.name: s for s in spans}
        assert sorted(s.name for s in spans if s.name in ("agent", "step", "detached", "outside")) == ["agent", "step"]
        agent, step = by_name["agent"], by_name["step"]
        assert agent.attributes["task"] == step.attributes["task"] == task["question"]  # never another rollout's
        assert step.parent_id == agent.span_id and step.trace_id == agent.trace_id
        assert agent.attempt_id == step.attempt_id == attempts[rollout.rollout_id]
