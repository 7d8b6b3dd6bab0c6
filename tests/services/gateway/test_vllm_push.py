"""The learner's weight push to vLLM (``voltbus.services.learner.vllm.push``) through a real gateway
and bus, in front of two stub vLLM servers: calls keep coming while versions are pushed, and every
recorded call carries the version that really sampled it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import wait_for
from voltbus.schemas import GatewayResumed
from voltbus.services.eventlog import EventLog
from voltbus.services.gateway.record import Call, model_called
from voltbus.services.learner.vllm.push import VllmPushError, push
from voltbus.services.settings import NatsSettings, ProjectorSettings

from .conftest import model_calls
from .stub_vllm import VllmControl, token_of
from .vllm_fleet import ADMIN, FleetFactory, control_events, make_fleet, one_call

__all__ = ["make_fleet"]  # the fixture


async def test_calls_during_pushes_carry_the_version_that_sampled_them(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    # engine 0 has vLLM's version routes and reports spans when asked; engine 1 is an older vLLM
    fleet = await make_fleet(VllmControl(), VllmControl(version_routes=False))
    done: list[httpx.Response] = []
    stop = asyncio.Event()

    async def agent(n: int) -> None:
        extra = {"stream": True, "return_weight_versions": True} if n % 2 else {}
        async with httpx.AsyncClient(base_url=fleet.url) as http:
            while not stop.is_set():
                done.append(await one_call(http, **extra))

    async with httpx.AsyncClient(base_url=fleet.url) as http:
        assert (await one_call(http)).status_code == 200  # before any push: no version known
    [unknown] = await model_calls(eventlog, 1)
    assert unknown.resources_id is None and unknown.response_ids[0] == token_of(0)

    first = await push(fleet.learner, "run:1", "w/step-0")
    assert [s.labelled for s in first.servers] == [True, False]
    agents = [asyncio.create_task(agent(n)) for n in range(6)]
    await wait_for(lambda: len(done) >= 12, what="calls before the second push")
    second = await push(fleet.learner, "run:2", "w/step-1/model.safetensors")
    before = len(done)
    await wait_for(lambda: len(done) >= before + 12, what="calls after the second push")
    stop.set()
    await asyncio.gather(*agents)

    assert all(r.status_code == 200 for r in done)
    assert second.drain_s >= 0 and second.paused_s >= second.swap_s > 0
    for stub in fleet.stubs:
        assert stub.weights == ["models/start", "w/step-0", "w/step-1"]
        assert stub.inflight_at_reload == [0, 0] and stub.arrived_while_reloading == 0
    swap = ["pause:wait", "collective_rpc:reload_weights", "reset_prefix_cache"]
    assert fleet.stubs[0].ops == 2 * [*swap, "update_weight_version", "weight_info", "resume"]
    assert fleet.stubs[1].ops == 2 * [*swap, "resume"]
    assert fleet.stubs[0].label == "run:2"

    calls = await model_calls(eventlog, 1 + len(done))
    sampled_by = {token_of(1): "run:1", token_of(2): "run:2"}
    labels = [(c.resources_id, sampled_by[c.response_ids[0]]) for c in calls[1:]]
    assert all(label == truth for label, truth in labels), labels
    assert {label for label, _ in labels} == {"run:1", "run:2"}
    assert {c.upstream for c in calls} == {f"{e}/v1" for e in fleet.engines}
    assert any(c.streamed for c in calls) and any(not c.streamed for c in calls)
    spans = [c for c in calls if c.streamed and c.upstream == f"{fleet.engines[0]}/v1"]
    assert spans and all(b'"weight_versions"' in bytes(c.response) for c in spans)  # kept from the last chunk

    events = await control_events(eventlog)
    assert [type(e).__name__ for e in events] == ["GatewayPaused", "GatewayResumed"] * 2
    assert events[0].reason == "weight swap to run:1"
    assert events[3].versions == {e: "run:2" for e in fleet.engines}


async def test_a_failed_reload_resumes_the_gateway_and_names_the_server(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    broken = VllmControl(reload_error="CUDA out of memory")
    slow = VllmControl(reload_s=1.0)
    garbled = VllmControl(garbled_weight_info=True)
    fleet = await make_fleet(broken, slow, garbled, vllm_timeout_s=0.3)
    with pytest.raises(VllmPushError) as failed:
        await push(fleet.learner, "run:2", "w/step-1")
    message = str(failed.value)
    assert f"vLLM server {fleet.engines[0]}: reload_weights from w/step-1: HTTP 500" in message
    assert "CUDA out of memory" in message
    assert f"vLLM server {fleet.engines[1]}: reload_weights from w/step-1: no answer within 0.3 s" in message
    assert f"vLLM server {fleet.engines[2]}: GET /weight_info: reports weight_version None" in message
    assert broken.ops[-1] == slow.ops[-1] == garbled.ops[-1] == "resume"  # vLLM itself is not left paused either

    async with httpx.AsyncClient(base_url=fleet.url, headers=ADMIN) as http:
        state = (await http.get("/admin/inflight")).json()
        assert state["paused"] is False
        assert state["versions"] == {e: None for e in fleet.engines}  # unknown, not the old label
        assert [(await one_call(http)).status_code for _ in range(3)] == [200, 200, 200]
    calls = await model_calls(eventlog, 3)
    assert {c.upstream for c in calls} == {f"{e}/v1" for e in fleet.engines}
    assert all(c.resources_id is None for c in calls)
    [_, resumed] = await control_events(eventlog)
    assert isinstance(resumed, GatewayResumed) and resumed.versions == {e: None for e in fleet.engines}


async def test_a_drain_past_its_deadline_pushes_nothing_and_resumes(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    held = VllmControl(hold=asyncio.Event())
    fleet = await make_fleet(held, drain_timeout_s=0.2)
    await push(fleet.learner, "run:1", "w/step-0")
    async with httpx.AsyncClient(base_url=fleet.url) as http:
        call = asyncio.create_task(one_call(http))
        await wait_for(lambda: held.inflight == 1, what="a call in flight at the engine")
        with pytest.raises(VllmPushError, match=r"1 calls still in flight after 0.2 s; nothing pushed"):
            await push(fleet.learner, "run:2", "w/step-1")
        assert held.weights == ["models/start", "w/step-0"]
        state = (await http.get("/admin/inflight", headers=ADMIN)).json()
        assert state["paused"] is False and state["versions"] == {fleet.engines[0]: "run:1"}
        assert held.hold is not None
        held.hold.set()
        assert (await call).status_code == 200
    [recorded] = await model_calls(eventlog, 1)
    assert recorded.resources_id == "run:1"
    events = await control_events(eventlog)
    assert [type(e).__name__ for e in events] == ["GatewayPaused", "GatewayResumed"] * 2
    assert events[3].versions == {}  # unchanged


async def test_an_engine_the_gateway_does_not_have_is_refused_before_any_reload(make_fleet: FleetFactory) -> None:
    stub = VllmControl()
    fleet = await make_fleet(stub)
    settings = fleet.learner.model_copy(update={"vllm_urls": [*fleet.engines, "http://127.0.0.1:9"]})
    with pytest.raises(VllmPushError, match=r"http://127.0.0.1:9 not among the gateway's engines"):
        await push(settings, "run:1", "w/step-0")
    assert stub.ops == []
    async with httpx.AsyncClient(base_url=fleet.url, headers=ADMIN) as http:
        assert (await http.get("/admin/inflight")).json()["paused"] is False
        refused = await http.post("/admin/resume", json={"versions": {"http://127.0.0.1:9": "x"}})
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "unknown_engine"


def test_the_engine_label_wins_then_vllm_spans_then_the_protocol() -> None:
    call = Call("ro-1", "at-1", "chat", {"model": "policy"}, [], "http://gpu-1:8000/v1")
    spans = [{"version": "run:1", "start": 0, "end": 1}, {"version": "run:2", "start": 1, "end": 2}]

    def label(response: dict[str, Any]) -> str | None:
        return model_called(call, response, http_status=200, served="run:1").resources_id

    assert label({"choices": [{"token_ids": [1, 2]}]}) == "run:1"  # the protocol's
    assert label({"choices": [{"token_ids": [1, 2], "weight_versions": spans[1:]}]}) == "run:2"
    assert label({"choices": [{"token_ids": [1, 2], "weight_versions": spans}]}) is None  # two versions sampled it
    unset = [{"version": "default", "start": 0, "end": 2}]  # vLLM's weights nobody labelled (restarted)
    assert label({"choices": [{"token_ids": [1, 2], "weight_versions": unset}]}) is None
    assert label({"weight_version": "run:3", "choices": [{"token_ids": [1, 2], "weight_versions": spans}]}) == "run:3"


async def test_the_learner_pushes_each_version_it_publishes(
    make_fleet: FleetFactory, nats_settings: NatsSettings, tmp_path
) -> None:
    from voltbus.services.learner.grpo.loop import GRPO
    from voltbus.services.learner.session import Session
    from voltbus.store import connect

    stub = VllmControl()
    fleet = await make_fleet(stub)
    weights = tmp_path / "run" / "step-0" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"weights of step 0")
    store = await connect(settings=nats_settings, name="test-learner")
    try:
        loop = GRPO(fleet.learner.model_copy(update={"weights_in_bus_mb": 0}))
        published = await loop.publish(
            Session(store, "run", ProjectorSettings(url="http://127.0.0.1:9")), weights, "ab" * 32
        )
    finally:
        await store.close()
    assert published == "run:1"
    assert stub.weights[-1] == str(weights.parent) and stub.label == "run:1"  # loaded and labelled by the learner
    async with httpx.AsyncClient(base_url=fleet.url, headers=ADMIN) as http:
        assert (await http.get("/admin/inflight")).json()["paused"] is False
