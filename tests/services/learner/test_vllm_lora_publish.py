"""A LoRA learner pushing to vLLM (``learner.vllm_urls`` with ``lora_rank``): each published version's
``ProxyLLM`` names the model its calls must ask for (the base for version 1, then that version's adapter,
loaded on the stub vLLM under that name), so a rollout of the version reaches its adapter through the gateway."""

from __future__ import annotations

from pathlib import Path

import httpx

from voltbus.schemas.resources import ProxyLLM
from voltbus.services.eventlog import EventLog
from voltbus.services.learner.grpo.loop import GRPO
from voltbus.services.learner.grpo.lora import ADAPTER
from voltbus.services.learner.grpo.policy import Policy, initial_weights
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings, ProjectorSettings
from voltbus.store import connect

from ..gateway.conftest import model_calls
from ..gateway.stub_vllm import VllmControl
from ..gateway.vllm_fleet import CALL, FleetFactory, make_fleet

__all__ = ["make_fleet"]  # the fixture


async def test_each_version_names_the_model_its_calls_reach(
    make_fleet: FleetFactory, nats_settings: NatsSettings, eventlog: EventLog, policy_dir: Path, tmp_path: Path
) -> None:
    stub = VllmControl()
    fleet = await make_fleet(stub, lora_rank=4, model_dir=policy_dir, weights_dir=tmp_path / "w")
    store = await connect(settings=nats_settings)
    session = Session(store, "run-lora", ProjectorSettings(url="http://127.0.0.1:1"))
    learner = GRPO(fleet.learner)
    try:
        await session.open(learner.name, {})
        base = await learner.publish(session, *initial_weights(fleet.learner))
        policy = Policy.load(fleet.learner)
        versions = []
        for step in range(2):
            for p in policy.model.parameters():
                if p.requires_grad:
                    p.data.add_(0.01 * (step + 1))  # a different adapter each time
            weights, sha = policy.save(session.run_id, step)
            versions.append((await learner.publish(session, weights, sha), weights, sha))
        llms = {
            rid: (await store.get_resources_by_id(rid)).resources["main_llm"]
            for rid in [base] + [v[0] for v in versions]
        }
    finally:
        await session.close()
        await store.close()
    assert isinstance(llms[base], ProxyLLM) and llms[base].model == "policy"
    (second, weights, sha) = versions[1]
    name = f"policy-lora-{sha[:12]}"
    assert weights.name == ADAPTER and llms[second].model == name and llms[versions[0][0]].model != name
    assert stub.adapters == {name: str(weights.parent)}  # the first adapter unloaded
    assert [op.split(":")[0] for op in stub.ops] == ["load_lora", "load_lora", "unload_lora"]
    async with httpx.AsyncClient(base_url=fleet.url) as http:  # a rollout of that version, as its agent calls
        assert (await http.post("/v1/chat/completions", json={**CALL, "model": llms[second].model})).status_code == 200
    [call] = await model_calls(eventlog, 1)
    assert call.resources_id == second and stub.models_called == [name]
