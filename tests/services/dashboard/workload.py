"""A small, known workload for the dashboard: rollouts in four statuses, 64 live runners and two stale ones, one
rollout's span tree with a model call (its text and token ids) and a reward, a training run of four steps over two
resources versions, and validation rollouts of three of the run's versions."""

from __future__ import annotations

import time

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled, RewardReported, SpanRecorded, SpanStatus
from voltbus.schemas.training import RunStarted, StepCompleted, StepStarted
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.store import AttemptedRollout, Store

ROLLOUTS = {"queuing": 2, "preparing": 2, "succeeded": 7, "failed": 1}  # with the validation rollouts
ATTEMPTS = {"preparing": 2, "succeeded": 7, "failed": 1}
REWARDS = [0.2, 0.5, 0.4, 0.8]  # reward_mean of steps 1..4
STALENESS = [(0.0, 0, 0), (0.5, 1, 0), (1.0, 1, 2), (0.25, 1, 0)]  # mean, max, rows dropped
ROLLOUT_REWARDS = [0.1, 0.3, 0.9, 0.7]  # each claimed rollout's reward; versions: v1 -> 0.2, v2 -> 0.8
# (sequence_id, name, span_id, parent_id), published out of order: agent > (llm > tool, reward)
SPANS = [
    (3, "tool", "c" * 16, "b" * 16),
    (1, "agent", "a" * 16, None),
    (4, "reward", "d" * 16, "a" * 16),
    (2, "llm", "b" * 16, "a" * 16),
]
WORKER = "runner-1"
RUN = "run-dash"
EMPTY_RUN = "run-new"  # started after RUN, no step or validation yet: the page opens on RUN
LIVE = [f"Worker-{n}" for n in range(64)]  # reported in a shuffled order; Worker-0..63 busy when n % 8 == 0
STALE = ["Worker-64", "Worker-65"]  # last heartbeat an hour ago: stopped
STALE_AGE_S = 3600.0
# The run's validation: (version, rewards of its val rollouts; None: still running). Version 1 starts the run
# (sampled by steps 1 and 2), version 3 was published by step 2 (sampled by step 3), 5 by step 4 (sampled by none).
VALIDATION = [(f"{RUN}:1", [0.25, 0.75]), (f"{RUN}:3", [0.9, 0.7]), (f"{RUN}:5", [1.0, None])]
VALIDATION_SHOWN = [(1, 0.5, "2 of 2"), (3, 0.8, "2 of 2"), (5, 1.0, "1 of 2")]  # step, mean reward, ended
PROMPT = "What is <b>2+2</b>?"  # shown as the text it is, never as markup
ANSWER = "The answer is 4."


async def claim(store: Store) -> AttemptedRollout:
    """The oldest queued rollout, claimed by ``WORKER``: a dequeue may find none yet on a busy machine (the
    dispatch consumer has not delivered it), so it asks again until a deadline."""
    deadline = time.monotonic() + 60
    while (claimed := await store.dequeue_rollout(worker_id=WORKER)) is None:
        assert time.monotonic() < deadline, "no queued rollout could be claimed in 60 s"
    return claimed


async def write(store: Store) -> dict[str, object]:
    """Write the workload; returns the ids the test looks for."""
    val = [
        (await store.enqueue_rollout(input={"v": n}, mode="val", resources_id=version), reward)
        for version, rewards in VALIDATION
        for n, reward in enumerate(rewards)
    ]
    val_claims = [await claim(store) for _ in val]
    assert [r.rollout_id for r in val_claims] == [r.rollout_id for r, _ in val]
    for r, (_, reward) in zip(val_claims, val, strict=True):
        if reward is not None:
            await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
    queued = [await store.enqueue_rollout(input={"i": i}) for i in range(6)]
    claimed = [await claim(store) for _ in range(4)]
    for r, status in zip(claimed[:3], ("succeeded", "succeeded", "failed"), strict=True):
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status=status)
    await store.update_worker(WORKER, {"cpu_usage_pct": 5.0})
    await write_workers(store)
    shown = claimed[0]
    rid, aid = shown.rollout_id, shown.attempt.attempt_id
    events: list[object] = [
        SpanRecorded(
            event_id=derive_id(rid, "span", seq),
            rollout_id=rid,
            attempt_id=aid,
            sequence_id=seq,
            trace_id="0" * 31 + "1",
            span_id=span_id,
            parent_id=parent,
            name=name,
            start_time=float(seq),
            end_time=seq + 0.5,
            status=SpanStatus(status_code="OK"),
        )  # fmt: skip
        for seq, name, span_id, parent in SPANS
    ]
    request = msgspec.json.encode({"messages": [{"role": "user", "content": PROMPT}]})
    response = msgspec.json.encode({"choices": [{"message": {"role": "assistant", "content": ANSWER}}]})
    events.append(
        ModelCalled(
            event_id=derive_id(rid, "call"),
            rollout_id=rid,
            attempt_id=aid,
            call_id="call-1",
            model="tiny",
            request=msgspec.Raw(request),
            response=msgspec.Raw(response),
            prompt_ids=[101, 102, 103],
            response_ids=[7, 8],
            logprobs=[-0.25, -1.5],
            latency_s=0.01,
            at=2.0,
        )  # fmt: skip
    )
    for r, value in zip(claimed, ROLLOUT_REWARDS, strict=True):
        events.append(
            RewardReported(
                event_id=derive_id(r.rollout_id, "reward"),
                rollout_id=r.rollout_id,
                attempt_id=r.attempt.attempt_id,
                value=value,
                at=3.0,
            )  # fmt: skip
        )
    for r, (_, reward) in zip(val_claims, val, strict=True):
        if reward is not None:
            events.append(RewardReported(event_id=derive_id(r.rollout_id, "reward"), rollout_id=r.rollout_id,
                                         attempt_id=r.attempt.attempt_id, value=reward, at=3.0))  # fmt: skip
    await store.log.publish_spans(events)
    await store.log.js.publish(store.topology.rollout_events("ro-poison"), b"\xffnot an event")  # quarantined
    run = [RunStarted(event_id=derive_id(RUN), run_id=RUN, algorithm="grpo", config=msgspec.Raw(b"{}"), at=1.0)]
    for step, (reward, (s_mean, s_max, dropped)) in enumerate(zip(REWARDS, STALENESS, strict=True), start=1):
        version = f"{RUN}:{1 + (step - 1) // 2}"
        batch = [r.rollout_id for r in claimed[(step - 1) // 2 * 2 : (step - 1) // 2 * 2 + 2]] if step % 2 else []
        metrics = {"reward_mean": reward, "reward_std": 0.1, "staleness_mean": s_mean, "staleness_max": s_max}
        run += [
            StepStarted(event_id=derive_id(RUN, "s", step), run_id=RUN, step=step, resources_id=version,
                        rollout_ids=batch, at=1.0 + step),
            StepCompleted(event_id=derive_id(RUN, "c", step), run_id=RUN, step=step, resources_id=f"{RUN}:{step + 1}",
                          metrics={**metrics, "rows_dropped_stale": dropped}, at=1.5 + step),
        ]  # fmt: skip
    for event in run:
        await store.log.append([event])
    newer = RunStarted(event_id=derive_id(EMPTY_RUN), run_id=EMPTY_RUN, algorithm="grpo", config=msgspec.Raw(b"{}"),
                       at=time.time())  # fmt: skip
    await store.log.append([newer])
    return {"shown": rid, "queued": [r.rollout_id for r in queued]}


async def write_workers(store: Store) -> None:
    """Report the live runners (shuffled, so the page's order is its own) and the stale ones."""
    now = time.time()
    order = sorted(LIVE + STALE, key=lambda w: w[::-1])  # neither alphabetical nor natural
    for worker in order:
        n = int(worker.rsplit("-", 1)[1])
        beat = now - STALE_AGE_S if worker in STALE else now
        busy = worker in LIVE and n % 8 == 0
        report = WorkerStatusReported(
            event_id=derive_id(worker, "status"), worker_id=worker, status="busy" if busy else "idle",
            current_rollout_id=f"ro-{worker}" if busy else None, at=beat, last_heartbeat_time=beat,
        )  # fmt: skip
        await store.log.append([report])
