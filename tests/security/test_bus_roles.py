"""Every service doing its real job on its own role, on a server that enforces the generated permissions.

The learner publishes resources, weights and a run and enqueues; the gateway records model calls;
an isolated runner claims and finishes (its agent sees no ``VOLTBUS_*`` variable); the coordinator
expires an attempt nobody runs; the projector serves the outcome in SQL; inference fetches the
weights. The server logs no permission violation, and a stale attempt's end is refused by the decider.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pyarrow.ipc as ipc
import pytest

from voltbus.schemas.errors import IllegalTransition
from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.schemas.rollouts import ErrorInfo, RolloutConfig
from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.schemas.training import RunStarted
from voltbus.services.coordinator.app import run as run_coordinator
from voltbus.services.eventlog import Envelope, EventLog
from voltbus.services.gateway import build_app
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.app import run as run_projector
from voltbus.services.runner.app import Runner
from voltbus.services.serving import free_port
from voltbus.services.settings import (
    CoordinatorSettings,
    GatewaySettings,
    ProjectorSettings,
    RunnerSettings,
    Settings,
)
from voltbus.store import Store, connect

from ..services.gateway.stub_llm import StubControl, serve, stub_app
from .test_bus_permissions import auth_dir, role_settings, secured_server, violations  # noqa: F401

AGENT = "tests.security.bus_agent:credential_free_agent"
RESOURCES = {
    "main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model="stub"),
    "prompt": PromptTemplate(template="Q: {question}\nA:", engine="f-string"),
}


async def learner_job(store: Store, weights: Path) -> str:
    """What the learner publishes before a step: resources, its weights in the bus, its run."""
    await store.add_resources(RESOURCES)
    uri = await store.log.put_weights("policy-v1.bin", weights)
    run = RunStarted(event_id="run-sec-started", run_id="run-sec", algorithm="grpo", config={}, at=1.0)
    await store.log.append([run])
    return uri


async def projected(url: str, sql: str, min_seq: dict[str, int]) -> list[dict[str, object]]:
    async with httpx.AsyncClient() as client:
        reply = await client.post(f"{url}/sql", json={"sql": sql, "min_seq": min_seq, "timeout": 20})
    assert reply.status_code == 200, reply.text
    return ipc.open_stream(io.BytesIO(reply.content)).read_all().to_pylist()


@pytest.mark.e2e
async def test_every_role_does_its_job_with_its_own_credentials(
    secured_server: NatsServer,  # noqa: F811
    auth_dir: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    role = {r: role_settings(secured_server, auth_dir, r).model_copy(update={"request_timeout_s": 5.0})
            for r in ("learner", "runner", "gateway", "coordinator", "projector", "inference")}  # fmt: skip
    before = len(violations(secured_server))
    weights = tmp_path / "policy.bin"
    weights.write_bytes(b"weights" * 1000)
    for name, value in {"VOLTBUS_NATS__USER": "runner", "VOLTBUS_NATS__PASSWORD": role["runner"].password}.items():
        monkeypatch.setenv(name, value or "")  # as compose sets them: the agent must not inherit them
    stop_runner, stop = asyncio.Event(), asyncio.Event()
    async with AsyncExitStack() as stack:
        learner = await connect(settings=role["learner"], name="learner")
        stack.push_async_callback(learner.close)
        uri = await learner_job(learner, weights)
        coordinator = asyncio.create_task(
            run_coordinator(Settings(nats=role["coordinator"], coordinator=CoordinatorSettings(tick_s=0.05)), stop)
        )
        sql_url, projector_cfg = (
            f"http://127.0.0.1:{(port := free_port())}",
            ProjectorSettings(db=tmp_path / "p.db", port=port),
        )
        projector = asyncio.create_task(run_projector(Settings(nats=role["projector"], projector=projector_cfg), stop))
        engine = await stack.enter_async_context(serve(stub_app(StubControl())))
        gw = GatewaySettings(upstream_url=f"{engine}/v1", key_secret="rollout-keys")
        gateway = await stack.enter_async_context(serve(build_app(Settings(nats=role["gateway"], gateway=gw)), "on"))

        ghost = await learner.enqueue_rollout({"question": "1+1"}, config=RolloutConfig(timeout_seconds=0.5))
        claimer = await connect(settings=role["runner"], name="runner-claims")
        stack.push_async_callback(claimer.close)
        claimed = await claimer.dequeue_rollout(worker_id="ghost-worker")  # claimed, never run: the coordinator ends it
        assert claimed is not None and claimed.rollout_id == ghost.rollout_id
        real = await learner.enqueue_rollout({"question": "6*7"}, mode="train")
        runner_cfg = RunnerSettings(isolate=True, gateway_url=gateway, claim_wait_s=0.2, heartbeat_s=0.2)
        async with Runner(Settings(nats=role["runner"], gateway=gw, runner=runner_cfg), AGENT) as runner:
            running = asyncio.create_task(runner.run(stop_runner))
            done = await learner.wait_for_rollouts(rollout_ids=[real.rollout_id, ghost.rollout_id], timeout=60)
            stop_runner.set()
            await running

        statuses = {r.rollout_id: r.status for r in done}
        assert statuses == {real.rollout_id: "succeeded", ghost.rollout_id: "failed"}
        with pytest.raises(IllegalTransition):  # the timed-out worker cannot end its attempt any more
            await claimer.finish_attempt(
                ghost.rollout_id, claimed.attempt.attempt_id, ErrorInfo(type="Late", message="x")
            )

        spans = [e.event async for e in learner.log.telemetry() if isinstance(e, Envelope)]
        assert [c.rollout_id for c in spans if isinstance(c, ModelCalled)] == [real.rollout_id]
        assert [r.value for r in spans if isinstance(r, RewardReported)] == [1.0], "the agent saw VOLTBUS_* variables"

        inference = await EventLog.connect(role["inference"], name="inference")
        stack.push_async_callback(inference.close)
        digest = hashlib.sha256(weights.read_bytes()).hexdigest()
        assert (await inference.fetch_weights(uri, tmp_path / "cache", digest)).read_bytes() == weights.read_bytes()

        end = (await learner.log.js.stream_info(learner.topology.control_stream)).state.last_seq
        rows = await projected(sql_url, "select rollout_id, status from rollouts", {"control": end})
        stop.set()
        await asyncio.wait_for(asyncio.gather(coordinator, projector), timeout=15)
    assert {r["rollout_id"]: r["status"] for r in rows} == statuses
    assert violations(secured_server, before) == [], "a role was refused something its job needs"
