"""The workload of ``bench_training``: three-turn tool conversations whose prompts extend the context
exactly, written as voltbus writes them (Store for the lifecycle, ``publish_spans`` for telemetry);
the projector without training tables; the live lag run."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import msgspec
import pyarrow as pa

from voltbus.projections import training
from voltbus.projections.adapter import AttemptInput
from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled, SpanRecorded
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store, connect

TURNS, PROMPT, RESPONSE, OBSERVATION = 3, 256, 64, 16
REQUEST = msgspec.json.encode({"model": "tiny", "messages": [{"role": "user", "content": "What is 48 / 2 + 7? " * 8}]})


class NoTraining(Projector):
    """The projector with the training tables left empty (the baseline)."""

    def _commit(
        self, blocks_: list[tuple[str, pa.Table]], checkpoints: list[tuple[str, int, float]], *_: object
    ) -> None:  # noqa: E501
        super()._commit(blocks_, checkpoints, [], [])


def _span(rid: str, aid: str, n: int, name: str, parent: str | None, attrs: dict[str, object]) -> SpanRecorded:
    return SpanRecorded(
        event_id=derive_id(rid, aid, "span", n), rollout_id=rid, attempt_id=aid, sequence_id=n,
        trace_id=derive_id(rid, aid), span_id=derive_id(rid, aid, n)[:16], parent_id=parent, name=name,
        start_time=float(n), end_time=float(n), attributes=attrs,
    )  # fmt: skip


def telemetry(rid: str, aid: str, i: int) -> list[ModelCalled | SpanRecorded]:
    """One attempt's 3 gateway calls (an exact prefix chain), their 3 runner spans, a reward span, the agent span."""
    agent = derive_id(rid, aid, 99)[:16]
    context = [(7 * j + i) % 32000 for j in range(PROMPT)]
    out: list[ModelCalled | SpanRecorded] = []
    for turn in range(TURNS):
        response = [(i + 131 * turn + j) % 32000 for j in range(RESPONSE)]
        body = {"id": f"chatcmpl-{rid}-{turn}", "choices": [{"message": {"role": "assistant", "content": "24+7"}}]}
        out.append(
            ModelCalled(
                event_id=derive_id(rid, aid, "call", turn), rollout_id=rid, attempt_id=aid, call_id=f"{rid}-c{turn}",
                model="tiny", request=msgspec.Raw(REQUEST), response=msgspec.Raw(json.dumps(body).encode()),
                prompt_ids=context, response_ids=response, logprobs=[-0.25] * RESPONSE, latency_s=0.01, at=float(turn),
            )
        )  # fmt: skip
        attrs = {"voltbus.llm.response": json.dumps({"id": body["id"]})}
        out.append(_span(rid, aid, 1 + turn, "openai.chat.completions.create", agent, attrs))
        context = context + response + [(j * 3 + turn) % 32000 for j in range(OBSERVATION)]
    reward = {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": (i % 5) / 4}
    out.append(_span(rid, aid, 4, "agentlightning.annotation", agent, reward))
    out.append(msgspec.structs.replace(_span(rid, aid, 5, "agent", None, {"agent.name": "solver"}), span_id=agent))
    return out


async def claimed(store: Store, n: int) -> list[tuple[str, str]]:
    """``n`` rollouts enqueued and claimed: (rollout_id, attempt_id)."""
    out: list[tuple[str, str]] = []
    for i in range(0, n, 1000):
        chunk = min(1000, n - i)
        await store.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input={"task_id": f"t{(i + k) % 64}"}) for k in range(chunk)]
        )
        out += [
            (r.rollout_id, r.attempt.attempt_id) for r in await store.dequeue_many_rollouts(limit=chunk, worker_id="w")
        ]
    return out


async def fill(settings: NatsSettings, n: int) -> None:
    """Store ``n`` attempts: claimed, their telemetry, then succeeded (32 completions in flight)."""
    store = await connect(settings=settings)
    try:
        keys = await claimed(store, n)
        events = [e for i, (r, a) in enumerate(keys) for e in telemetry(r, a, i)]
        for i in range(0, len(events), 4000):
            await store.log.publish_spans(events[i : i + 4000])
        for i in range(0, n, 32):
            await asyncio.gather(*(store.update_attempt(r, a, status="succeeded") for r, a in keys[i : i + 32]))
    finally:
        await store.close()


async def stored_inputs(settings: NatsSettings, path: Path, batch: int) -> list[AttemptInput]:
    """Every ended attempt's adapter input, read from a freshly built projection."""
    store = await connect(settings=settings)
    projector = Projector(path)
    try:
        await project(projector, store.log, ends=await ends_at(store.log), batch_size=batch)
        keys = projector.con.execute("SELECT rollout_id, attempt_id FROM training_attempts").fetchall()
        done = training._ended(projector.con, projector.blocks, sorted(tuple(k) for k in keys))
        return training._inputs(projector.con, projector.blocks, done)
    finally:
        projector.close()
        await store.close()
        for p in (path, path.with_name(path.name + ".wal")):
            p.unlink(missing_ok=True)


async def lag(
    settings: NatsSettings, rate: float, seconds: float, path: Path, projector_cls: type[Projector] = Projector
) -> tuple[list[float], list[float], int, float]:
    """Attempts finished at ``rate``/s under a live projector: per attempt, seconds from the start of its
    ``update_attempt(succeeded)`` until its training_attempts row (all triplets) / its attempts row is visible."""
    store = await connect(settings=settings)
    n = round(rate * seconds)
    keys = await claimed(store, n)
    projector, stop, advanced = projector_cls(path), asyncio.Event(), asyncio.Event()
    following = asyncio.create_task(project(projector, store.log, stop=stop, progress=lambda *_: advanced.set()))
    reader = projector.con.cursor()
    ended: dict[str, float] = {}
    seen: dict[str, dict[str, float]] = {"trained": {}, "plain": {}}
    queries = {
        "trained": f"SELECT rollout_id FROM training_attempts WHERE triplets = {TURNS}"
        if projector_cls is Projector
        else "SELECT rollout_id FROM attempts WHERE status = 'succeeded'",  # the baseline has no training rows
        "plain": "SELECT rollout_id FROM attempts WHERE status = 'succeeded'",
    }

    def poll_once() -> None:
        for name, sql in queries.items():
            now = time.perf_counter()
            for (rid,) in reader.execute(sql).fetchall():
                seen[name].setdefault(rid, now)

    async def poll() -> None:
        while min(len(s) for s in seen.values()) < n:
            await asyncio.to_thread(poll_once)
            await asyncio.sleep(0.002)

    try:
        ends = await ends_at(store.log)
        async with asyncio.timeout(60):
            while projector.positions != ends:  # the claims are projected before timing starts
                await advanced.wait()
                advanced.clear()
        polling = asyncio.create_task(poll())
        start = time.perf_counter()
        for k, (rid, aid) in enumerate(keys):
            await asyncio.sleep(max(0.0, start + k / rate - time.perf_counter()))
            await store.log.publish_spans(telemetry(rid, aid, k))
            ended[rid] = time.perf_counter()
            await store.update_attempt(rid, aid, status="succeeded")
        took = time.perf_counter() - start
        await asyncio.wait_for(polling, 60)
    finally:
        stop.set()
        await following
        reader.close()
        projector.close()
        await store.close()
    return [seen["trained"][r] - t for r, t in ended.items()], [seen["plain"][r] - t for r, t in ended.items()], n, took
