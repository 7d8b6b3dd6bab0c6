"""Agent Lightning's algorithm pattern (its ``tests/benchmark/benchmark_store.py`` ``AlgorithmBatch``), written once
for both stores: the same code drives an ``agentlightning`` store client and a voltbus store.

batch  enqueue a wave (``add_resources``, then one ``enqueue_rollout`` at a time), poll
       ``wait_for_rollouts(rollout_ids=wave, timeout=0)``; for each newly finished rollout
       ``query_spans(rollout_id, attempt_id="latest")`` and check it; the next wave when all are done.
queue  AL's ``batch_partial``: whenever fewer than ``in_flight`` rollouts are active, enqueue ``batch`` more; poll
       ``query_rollouts(rollout_id_in=active)``; for each finished one ``query_spans`` and check it.

Each check is AL's ``check_spans``: the rollout succeeded, a span has ``task=<task>``, ``find_final_reward`` is in
[1, 2]. AL sleeps 5 s between polls; here ``poll_s`` (the same on both sides), and a poll that found something
polls again at once. Nothing here is timed but the whole run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

RUNNING = ("queuing", "preparing", "running", "requeuing")


@dataclass
class Shape:
    """One scenario: how many rollouts, how they are submitted, the agent's knobs."""

    name: str
    mode: str  # "batch" or "queue"
    rollouts: int
    batch: int
    in_flight: int  # queue: top up when fewer are active
    runners: int  # Agent Lightning's runner processes
    rounds: int
    sleep_s: float


SHAPES = {
    "a": Shape("a", "batch", 512, 128, 0, 8, 6, 0.1),
    "b": Shape("b", "batch", 512, 128, 0, 32, 6, 0.1),
    "c": Shape("c", "queue", 1024, 128, 256, 16, 4, 0.1),
    "d": Shape("d", "batch", 256, 256, 0, 8, 20, 0.1),
}


@dataclass
class Tally:
    """What one run of the pattern did."""

    rollouts: int = 0
    spans: int = 0
    seconds: float = 0.0
    polls: int = 0
    queries: int = 0
    bad: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    """The rollouts checked, in order."""

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("rollouts", "spans", "seconds", "polls", "queries", "bad")}


def check(agl: Any, spans: Any, task: str, status: str) -> str | None:
    """AL's ``check_spans`` and status check; the reason a rollout is wrong, or None."""
    spans = list(spans)
    if status != "succeeded":
        return f"{task}: {status}"
    if not any(s.attributes.get("task") == task for s in spans):
        return f"{task}: no span with the task among {len(spans)}"
    reward = agl.find_final_reward(spans)
    if reward is None or not 1 <= reward <= 2:
        return f"{task}: final reward {reward}"
    return None


async def settle(agl: Any, store: Any, rollout: Any, task: str, tally: Tally) -> None:
    """Query a finished rollout's spans and check them (AL's per-rollout step)."""
    spans = list(await store.query_spans(rollout.rollout_id, attempt_id="latest"))
    tally.queries += 1
    tally.spans += len(spans)
    tally.rollouts += 1
    tally.ids.append(rollout.rollout_id)
    if (reason := check(agl, spans, task, rollout.status)) is not None:
        tally.bad.append(reason)


async def enqueue(agl: Any, store: Any, n: int, first: int) -> dict[str, str]:
    """Publish an LLM resource and enqueue ``n`` tasks one at a time, as AL's algorithm does; id -> task."""
    await store.add_resources({"llm": agl.LLM(endpoint=f"http://localhost:{first}/v1", model=f"test-model-{first}")})
    out = {}
    for i in range(first, first + n):
        task = f"task-{i}"  # the same tasks on every side: the agent's draws are seeded by the task
        rollout = await store.enqueue_rollout(input=task, mode="train")
        out[rollout.rollout_id] = task
    return out


async def run_batch(agl: Any, store: Any, shape: Shape, poll_s: float, tally: Tally) -> None:
    submitted = 0
    while submitted < shape.rollouts:
        wave = await enqueue(agl, store, min(shape.batch, shape.rollouts - submitted), submitted)
        submitted += len(wave)
        pending = dict(wave)
        while pending:
            finished = await store.wait_for_rollouts(rollout_ids=list(wave), timeout=0.0)
            tally.polls += 1
            fresh = [r for r in finished if r.rollout_id in pending]
            for rollout in fresh:
                await settle(agl, store, rollout, pending.pop(rollout.rollout_id), tally)
            if pending and not fresh:
                await asyncio.sleep(poll_s)


async def run_queue(agl: Any, store: Any, shape: Shape, poll_s: float, tally: Tally) -> None:
    submitted, active = 0, {}
    while submitted < shape.rollouts or active:
        if submitted < shape.rollouts and len(active) < shape.in_flight:
            active |= await enqueue(agl, store, min(shape.batch, shape.rollouts - submitted), submitted)
            submitted = min(shape.rollouts, submitted + shape.batch)
            continue
        rollouts = await store.query_rollouts(rollout_id_in=list(active))
        tally.polls += 1
        done = [r for r in rollouts if r.rollout_id in active and r.status not in RUNNING]
        for rollout in done:
            await settle(agl, store, rollout, active.pop(rollout.rollout_id), tally)
        if not done:
            await asyncio.sleep(poll_s)


async def run_pattern(agl: Any, store: Any, shape: Shape, poll_s: float) -> Tally:
    """Run the scenario's algorithm to the end; the clock runs from the first enqueue to the last check."""
    tally, start = Tally(), time.perf_counter()
    runner = run_batch if shape.mode == "batch" else run_queue
    await runner(agl, store, shape, poll_s, tally)
    tally.seconds = time.perf_counter() - start
    return tally
