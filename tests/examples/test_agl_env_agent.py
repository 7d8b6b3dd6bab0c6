"""examples/agl_env_agent: an Agent Lightning 1.0-style agent (only AGL_OPENAI_BASE_URL / AGL_EVENT_URL /
AGL_KEY) trained with one tiny GRPO step through the real system with isolated runners: each rollout
in its own process, its call recorded by the gateway with token ids, its posted reward on the log."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import connect
from voltbus.trainer import GRPO, Trainer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agl_env_agent"


def load_run() -> ModuleType:
    spec = importlib.util.spec_from_file_location("voltbus_example_agl_env_run", EXAMPLE / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agent_knows_only_the_agl_variables() -> None:
    source = (EXAMPLE / "agent.py").read_text()
    assert "voltbus" not in source.split('"""')[2]  # the code, past the docstring, never names voltbus
    assert {"AGL_OPENAI_BASE_URL", "AGL_EVENT_URL", "AGL_KEY"} <= set(source.replace('"', " ").split())


async def test_one_grpo_step_with_isolated_agl_agents(nats_settings: NatsSettings, tmp_path: Path) -> None:
    run = load_run()
    settings = run.settings(nats_settings.namespace)
    # the inference server loads the model on this event loop: more than the fixture's 2 s NATS timeout
    settings.nats = nats_settings.model_copy(update={"request_timeout_s": 30.0})
    algo = GRPO(model_dir=run.MODEL, steps=1, tasks_per_step=2, group_size=2, weights_dir=tmp_path / "weights")
    trainer = Trainer(algorithm=algo, n_runners=4, settings=settings, say=lambda _: None)
    result = await algo.fit(trainer, run.AGENT, run.tasks(2), [])
    [step] = result["steps"]
    assert 0.0 <= step["reward_mean"] <= 1.0
    store = await connect(settings=settings.nats)
    try:
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    finally:
        await store.close()
    calls = [e for e in events if isinstance(e, ModelCalled) and e.response_ids]
    rewards = [e for e in events if isinstance(e, RewardReported)]
    assert len(rewards) == 4 and {r.value for r in rewards} <= {0.0, 1.0}
    assert {c.attempt_id for c in calls} == {r.attempt_id for r in rewards}  # every rewarded attempt's call
    assert all(c.status == "ok" and c.prompt_ids for c in calls)
