"""A real gateway and bus in front of stub vLLM servers, for the weight-push tests (``make_fleet``):
optionally reached by the learner through a flaky link (``faults``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from voltbus.schemas import GatewayPaused, GatewayResumed
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.gateway import build_app
from voltbus.services.settings import GatewaySettings, LearnerSettings, NatsSettings, Settings

from .flaky_link import Faults, flaky_link
from .stub_llm import serve
from .stub_vllm import VllmControl, stub_vllm_app

CALL = {"model": "policy", "messages": [{"role": "user", "content": "2+2?"}]}
ADMIN = {"Authorization": "Bearer root"}


@dataclass
class Fleet:
    """A gateway in front of stub vLLM servers, and the learner settings that push to all of them."""

    url: str
    engines: list[str]
    stubs: list[VllmControl]
    learner: LearnerSettings


FleetFactory = Callable[..., Awaitable[Fleet]]


@pytest.fixture
async def make_fleet(nats_settings: NatsSettings) -> AsyncIterator[FleetFactory]:
    async with AsyncExitStack() as stack:

        async def make(*stubs: VllmControl, faults: Faults | None = None, **learner: Any) -> Fleet:
            engines = [await stack.enter_async_context(serve(stub_vllm_app(s))) for s in stubs]
            cfg = GatewaySettings(upstream_urls=[f"{e}/v1" for e in engines], admin_key="root", engine_cooldown_s=0)
            url = await stack.enter_async_context(serve(build_app(Settings(nats=nats_settings, gateway=cfg)), "on"))
            stack.callback(release, stubs)  # before the servers stop: a held call would hold their shutdown
            seen_by_learner = await stack.enter_async_context(flaky_link(url, faults)) if faults else url
            defaults = {"drain_timeout_s": 5.0, "vllm_timeout_s": 5.0, "gateway_admin_key": "root"}
            gateway_url = f"{seen_by_learner}/v1"
            settings = LearnerSettings(gateway_url=gateway_url, vllm_urls=engines, **{**defaults, **learner})
            return Fleet(url, engines, list(stubs), settings)

        yield make


def release(stubs: tuple[VllmControl, ...]) -> None:
    for stub in stubs:
        stub.resumed.set()
        if stub.hold is not None:
            stub.hold.set()


async def control_events(eventlog: EventLog) -> list[Any]:
    stored = [e.event async for e in eventlog.replay("control") if isinstance(e, Envelope)]
    return [e for e in stored if isinstance(e, GatewayPaused | GatewayResumed)]


async def one_call(http: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    """A call that retries while the gateway answers 429 (paused)."""
    while True:
        resp = await http.post("/v1/chat/completions", json={**CALL, **extra})
        if resp.status_code != 429:
            return resp
        assert resp.headers["X-Agl-Paused"] == "true"
        await asyncio.sleep(0.005)  # the agent's back-off, shorter than Retry-After to keep the test fast


async def gateway_state(fleet: Fleet) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=fleet.url, headers=ADMIN) as http:
        return (await http.get("/admin/inflight")).json()
