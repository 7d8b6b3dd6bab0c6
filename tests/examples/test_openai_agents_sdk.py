"""examples/openai_agents_sdk: an OpenAI Agents SDK agent whose only voltbus part is the base_url.
Through the real system (bus, coordinator, projector, CPU inference, gateway, runner) its model
calls are recorded as ``ModelCalled`` events with token ids, and each rollout reports a reward."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from voltbus.schemas.resources import ProxyLLM
from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import EnqueueRolloutRequest, connect
from voltbus.trainer.system import local_system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openai_agents_sdk"
MODEL = EXAMPLE.parent / "arith_rl" / "model"


def load_example() -> ModuleType:
    if importlib.util.find_spec("agents") is None:
        pytest.fail(
            "the OpenAI Agents SDK (openai-agents) is not installed: install the examples extra, "
            "pip install -e '.[dev,learn,examples]'"
        )
    spec = importlib.util.spec_from_file_location("voltbus_example_openai_agents_sdk", EXAMPLE / "agent.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_sdk_agent_model_calls_are_recorded_with_token_ids(nats_settings: NatsSettings, tmp_path: Path) -> None:
    example = load_example()
    # the inference server loads the model on this event loop: more than the fixture's 2 s NATS timeout
    settings = Settings(nats=nats_settings.model_copy(update={"request_timeout_s": 30.0}))
    settings.learner = settings.learner.model_copy(update={"model_dir": MODEL, "weights_dir": tmp_path / "weights"})
    tasks = [{"id": f"{a}+{b}", "a": a, "b": b} for a, b in [(1, 2), (3, 4), (2, 2), (5, 0)]]
    async with local_system(settings, example.sdk_agent, n_runners=4) as wired:
        store = await connect(settings=wired.nats, name="test-openai-agents-sdk")
        try:
            llm = ProxyLLM(endpoint=wired.learner.gateway_url, model=wired.learner.served_model_name)
            await store.add_resources({"main_llm": llm})
            rollouts = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=t, mode="train") for t in tasks])
            ids = [r.rollout_id for r in rollouts]
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=60)
            events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        finally:
            await store.close()
    assert [r.status for r in done] == ["succeeded"] * len(tasks), [r.attempt.error for r in done if r.attempt]
    calls = [e for e in events if isinstance(e, ModelCalled)]
    rewards = [e for e in events if isinstance(e, RewardReported)]
    # one call per rollout, made by the SDK in the Responses API (recorded as the chat call the gateway
    # forwarded), attributed by the gateway to its attempt
    assert sorted(c.rollout_id for c in calls) == sorted(ids)
    assert all(c.status == "ok" and c.prompt_ids and c.response_ids for c in calls)
    assert sorted(r.rollout_id for r in rewards) == sorted(ids)
    assert all(r.value in (0.0, 1.0) for r in rewards)
