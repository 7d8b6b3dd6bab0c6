"""``Trainer.dev`` / ``fit`` with isolated (Agent Lightning 1.0-style) agents and no model of voltbus's own:
the gateway their ``AGL_*`` variables point at runs, in front of the engine the settings name."""

from __future__ import annotations

import pytest

from tests.services.gateway.stub_llm import StubControl, serve, stub_app
from voltbus.services.settings import GatewaySettings, NatsSettings, RunnerSettings, Settings
from voltbus.trainer import Baseline, Trainer

AGENT = "tests.services.runner.calc_agent:agl_env_agent_without_resources"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("runner", [{"isolate": True}, {"agents": "isolate"}], ids=["isolate", "agents=isolate"])
async def test_trainer_dev_runs_isolated_agents_through_a_gateway_to_the_configured_engine(
    nats_settings: NatsSettings, runner: dict[str, object]
) -> None:
    async with serve(stub_app(StubControl())) as engine:  # the stub answers 42
        settings = Settings(
            nats=nats_settings,
            gateway=GatewaySettings(upstream_url=f"{engine}/v1"),
            runner=RunnerSettings(**runner),  # type: ignore[arg-type]
        )
        trainer = Trainer(n_runners=2, settings=settings, say=lambda _: None)
        tasks = [{"question": "6*7", "answer": 42}, {"question": "6*7", "answer": 41}]
        out = await Baseline().fit(trainer, AGENT, tasks, [])  # what Trainer.dev runs
    assert out == {"train": {"mean_reward": pytest.approx(0.5), "rollouts": 2.0}}
