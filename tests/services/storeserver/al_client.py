"""Run by the real ``agentlightning==0.3.0`` (its own venv: ``VOLTBUS_TEST_AL_PYTHON``), not by pytest: Agent
Lightning's own ``LightningStoreClient`` and ``LitAgentRunner`` against ``voltbus store-server``, unmodified.

Usage: ``python al_client.py <store url> <rollouts>``; prints one JSON line of what Agent Lightning saw."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import agentlightning as agl
from agentlightning.store.client_server import LightningStoreClient
from agentlightning.types import EnqueueRolloutRequest
from opentelemetry import trace


@agl.rollout
def agent(task: dict, prompt_template: agl.PromptTemplate) -> float:
    """A prompt agent with one tool span of its own (OpenTelemetry's global API); its reward is the return value."""
    with trace.get_tracer("al-compat").start_as_current_span("tool", attributes={"q": task["q"]}):
        prompt_template.format(q=task["q"])
    return task["q"] / 10


async def main(url: str, n: int) -> None:
    client = LightningStoreClient(url)
    resources = await client.add_resources({"prompt": agl.PromptTemplate(template="Q: {q}", engine="f-string")})
    queued = await client.enqueue_many_rollouts([EnqueueRolloutRequest(input={"q": i}, mode="train") for i in range(n)])
    ids = [r.rollout_id for r in queued]
    runner = agl.LitAgentRunner(agl.OtelTracer(), max_rollouts=n, poll_interval=0.1)
    runner.init(agent)
    runner.init_worker(0, client)
    try:
        await runner.iter()
    finally:
        runner.teardown_worker(0)
        runner.teardown()
    deadline, done = time.monotonic() + 120, []
    while len(done) < n and time.monotonic() < deadline:
        done = await client.wait_for_rollouts(rollout_ids=ids, timeout=0.1)
    spans = {rid: [s.model_dump(mode="json") for s in await client.query_spans(rid)] for rid in ids}
    page = await client.query_rollouts(status_in=["succeeded"])
    # the rest of the client's reads, each answer validated by Agent Lightning's own pydantic models
    attempts = await client.query_attempts(ids[0])
    latest_resources = await client.get_latest_resources()
    by_id = await client.get_resources_by_id(resources.resources_id)
    all_resources = await client.query_resources()
    worker = await client.get_worker_by_id(attempts[0].worker_id)
    rollout = await client.get_rollout_by_id(ids[0])
    started = await client.start_rollout(input={"q": 99}, mode="val")
    cancelled = await client.update_rollout(started.rollout_id, status="cancelled")
    print(
        json.dumps(
            {
                "resources_id": resources.resources_id,
                "ids": ids,
                "done": [r.model_dump(mode="json") for r in done],
                "succeeded": [r.rollout_id for r in page],
                "spans": spans,
                "latest_attempt": (await client.get_latest_attempt(ids[0])).model_dump(mode="json"),
                "workers": [w.model_dump(mode="json") for w in await client.query_workers()],
                "attempts": [a.model_dump(mode="json") for a in attempts],
                "resources": [latest_resources.resources_id, by_id.version, all_resources.total],
                "worker": worker.model_dump(mode="json"),
                "rollout": rollout.model_dump(mode="json"),
                "cancelled": cancelled.status,
                "statistics": await client.statistics(),
            }
        )
    )
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
