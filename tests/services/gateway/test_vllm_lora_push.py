"""LoRA versions pushed to vLLM through its runtime LoRA API (``voltbus.services.learner.vllm.lora``), with a
real gateway and bus in front of two stub vLLM servers: each adapter loaded under its own name, the previous
one unloaded, calls naming the adapter served and labelled, and vLLM's refusals a clear error, never a hang."""

from __future__ import annotations

import httpx
import pytest

from voltbus.services.eventlog import EventLog
from voltbus.services.learner.vllm.push import VllmPushError, push

from .conftest import model_calls
from .stub_vllm import VllmControl
from .vllm_fleet import CALL, FleetFactory, control_events, gateway_state, make_fleet

__all__ = ["make_fleet"]  # the fixture

FIRST, SECOND = "policy-lora-aaaaaaaaaaaa", "policy-lora-bbbbbbbbbbbb"


async def test_each_adapter_is_loaded_under_its_name_and_the_previous_one_unloaded(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    fleet = await make_fleet(VllmControl(), VllmControl(), lora_rank=8)
    await push(fleet.learner, "run:1", "models/start/model.safetensors")  # version 1: the base, nothing to load
    await push(fleet.learner, "run:2", "w/step-0/adapter_model.safetensors", adapter=FIRST)
    for stub in fleet.stubs:
        assert stub.adapters == {FIRST: "w/step-0"} and stub.ops == [f"load_lora:{FIRST}"]  # no pause, no reload
    async with httpx.AsyncClient(base_url=fleet.url) as http:
        assert (await http.post("/v1/chat/completions", json={**CALL, "model": FIRST})).status_code == 200
    [call] = await model_calls(eventlog, 1)
    assert call.resources_id == "run:2" and FIRST in {m for s in fleet.stubs for m in s.models_called}

    await push(fleet.learner, "run:3", "w/step-1/adapter_model.safetensors", adapter=SECOND)
    await push(fleet.learner, "run:3", "w/step-1/adapter_model.safetensors", adapter=SECOND)  # a resumed learner
    for stub in fleet.stubs:
        assert stub.adapters == {SECOND: "w/step-1"}
        assert stub.ops == [f"load_lora:{FIRST}", f"load_lora:{SECOND}", f"unload_lora:{FIRST}"]
    async with httpx.AsyncClient(base_url=fleet.url) as http:
        gone = await http.post("/v1/chat/completions", json={**CALL, "model": FIRST})
    assert gone.status_code == 404  # vLLM's answer for an unloaded adapter, passed on

    await push(fleet.learner, "run:4", "models/start/model.safetensors")  # back to the base: adapters unloaded
    assert all(stub.adapters == {} and stub.ops[-1] == f"unload_lora:{SECOND}" for stub in fleet.stubs)
    events = await control_events(eventlog)
    resumed = [e.versions for e in events if type(e).__name__ == "GatewayResumed"]
    assert resumed == [dict.fromkeys(fleet.engines, v) for v in ("run:1", "run:2", "run:3", "run:3", "run:4")]


async def test_a_refused_adapter_is_a_clear_error_and_the_gateway_resumes(make_fleet: FleetFactory) -> None:
    refusal = "Loading lora policy-lora-aaaaaaaaaaaa failed: No adapter found for /w/step-0"
    stub = VllmControl(lora_refusal=(400, refusal))
    fleet = await make_fleet(stub, lora_rank=8)
    with pytest.raises(VllmPushError, match=r"load_lora_adapter policy-lora-a+ from w/step-0: HTTP 400: .*No adapter"):
        await push(fleet.learner, "run:2", "w/step-0/adapter_model.safetensors", adapter=FIRST)
    state = await gateway_state(fleet)
    assert state["paused"] is False and state["versions"] == {fleet.engines[0]: None}  # unknown, not run:2
    assert stub.adapters == {} and stub.ops == [f"load_lora:{FIRST}"]


async def test_a_vllm_without_runtime_lora_updates_says_how_to_start_it(make_fleet: FleetFactory) -> None:
    fleet = await make_fleet(VllmControl(runtime_lora=False), lora_rank=8)
    with pytest.raises(VllmPushError, match="--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
        await push(fleet.learner, "run:2", "w/step-0/adapter_model.safetensors", adapter=FIRST)
    assert (await gateway_state(fleet))["paused"] is False
