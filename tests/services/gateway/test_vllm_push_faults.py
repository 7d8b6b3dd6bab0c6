"""The weight push when it is cut short: cancelled mid-reload, a pause whose answer never came, a
resume that was lost. Nothing is left paused, and an engine whose weights may have changed is
labelled unknown, never with the old version."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import wait_for
from voltbus.services.eventlog import EventLog
from voltbus.services.learner.vllm.push import VllmPushError, push

from .conftest import model_calls
from .flaky_link import Faults
from .stub_vllm import VllmControl, token_of
from .vllm_fleet import FleetFactory, control_events, gateway_state, make_fleet, one_call

__all__ = ["make_fleet"]  # the fixture


async def test_a_push_cancelled_mid_reload_resumes_vllm_and_labels_the_engine_unknown(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    stub = VllmControl()
    fleet = await make_fleet(stub)
    await push(fleet.learner, "run:1", "w/step-0")
    stub.reload_s = 0.4  # long enough to cancel the next push in the middle of it
    pushing = asyncio.create_task(push(fleet.learner, "run:2", "w/step-1"))
    await wait_for(lambda: stub.reloading, what="the reload of run:2 under way")
    pushing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pushing
    assert stub.ops[-2:] == ["collective_rpc:reload_weights", "resume"] and not stub.paused
    state = await gateway_state(fleet)
    assert state["paused"] is False and state["versions"] == {fleet.engines[0]: None}
    await wait_for(lambda: not stub.reloading, what="the reload finished on the server")
    async with httpx.AsyncClient(base_url=fleet.url) as http:
        assert (await one_call(http)).status_code == 200
    [call] = await model_calls(eventlog, 1)
    assert call.response_ids[0] == token_of(2) and call.resources_id is None  # new weights, not labelled run:1


async def test_a_lost_resume_falls_back_to_unknown_not_the_old_versions(
    make_fleet: FleetFactory, eventlog: EventLog
) -> None:
    faults = Faults()
    fleet = await make_fleet(VllmControl(), VllmControl(), faults=faults)
    await push(fleet.learner, "run:1", "w/step-0")
    faults.cut.append(b"POST /admin/resume")  # the next resume never reaches the gateway
    with pytest.raises(VllmPushError, match=r"gateway resumed with .* unknown: gateway .*POST /admin/resume"):
        await push(fleet.learner, "run:2", "w/step-1")
    assert all(stub.weights[-1] == "w/step-1" for stub in fleet.stubs)
    state = await gateway_state(fleet)
    assert state["paused"] is False and state["versions"] == dict.fromkeys(fleet.engines)
    events = await control_events(eventlog)
    assert [type(e).__name__ for e in events] == ["GatewayPaused", "GatewayResumed"] * 2
    assert events[3].versions == dict.fromkeys(fleet.engines)


async def test_a_vllm_pause_past_its_deadline_is_undone(make_fleet: FleetFactory, eventlog: EventLog) -> None:
    slow = VllmControl(pause_s=0.6)
    fleet = await make_fleet(slow, vllm_timeout_s=0.2)
    with pytest.raises(VllmPushError, match=r"POST /pause: no answer within 0.2 s"):
        await push(fleet.learner, "run:1", "w/step-0")
    assert slow.ops == ["pause:wait", "resume"] and not slow.paused  # resumed, nothing reloaded
    assert slow.weights == ["models/start"]
    state = await gateway_state(fleet)
    assert state["paused"] is False and state["versions"] == {fleet.engines[0]: None}
    [_, resumed] = await control_events(eventlog)
    assert resumed.versions == {}  # never reloaded: left as it was


async def test_a_gateway_pause_whose_answer_is_lost_is_undone(make_fleet: FleetFactory, eventlog: EventLog) -> None:
    stub = VllmControl()
    faults = Faults(mute=[b"POST /admin/pause"])  # the gateway pauses; its answer never comes back
    fleet = await make_fleet(stub, faults=faults)
    with pytest.raises(VllmPushError, match=r"POST /admin/pause: no answer within 0.3 s"):
        await push(fleet.learner, "run:1", "w/step-0", admin_timeout_s=0.3)
    assert stub.ops == []
    assert [line.split(" HTTP")[0] for line in faults.seen] == ["POST /admin/pause", "POST /admin/resume"]
    assert (await gateway_state(fleet))["paused"] is False
    assert [type(e).__name__ for e in await control_events(eventlog)] == ["GatewayPaused", "GatewayResumed"]


async def test_a_pause_the_gateway_refused_is_not_answered_with_a_resume(make_fleet: FleetFactory) -> None:
    stub = VllmControl()
    faults = Faults()
    fleet = await make_fleet(stub, faults=faults, gateway_admin_key="wrong")
    with pytest.raises(VllmPushError) as failed:
        await push(fleet.learner, "run:1", "w/step-0")
    assert "POST /admin/pause: HTTP 401" in str(failed.value) and "left paused" not in str(failed.value)
    assert [line.split(" HTTP")[0] for line in faults.seen] == ["POST /admin/pause"] and stub.ops == []
