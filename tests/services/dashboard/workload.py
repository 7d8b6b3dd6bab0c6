"""A small, known workload for the dashboard: rollouts in four statuses, a worker, one rollout's span
tree with a model call and a reward, and a training run of four steps over two resources versions."""

from __future__ import annotations

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled, RewardReported, SpanRecorded, SpanStatus
from voltbus.schemas.training import RunStarted, StepCompleted, StepStarted
from voltbus.store import Store

ROLLOUTS = {"queuing": 2, "preparing": 1, "succeeded": 2, "failed": 1}
ATTEMPTS = {"preparing": 1, "succeeded": 2, "failed": 1}
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


async def write(store: Store) -> dict[str, object]:
    """Write the workload; returns the ids the test looks for."""
    queued = [await store.enqueue_rollout(input={"i": i}) for i in range(6)]
    claimed = [await store.dequeue_rollout(worker_id=WORKER) for _ in range(4)]
    for r, status in zip(claimed[:3], ("succeeded", "succeeded", "failed"), strict=True):
        await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status=status)
    await store.update_worker(WORKER, {"cpu_usage_pct": 5.0})
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
    raw = msgspec.Raw(b"{}")
    events.append(
        ModelCalled(
            event_id=derive_id(rid, "call"),
            rollout_id=rid,
            attempt_id=aid,
            call_id="call-1",
            model="tiny",
            request=raw,
            response=raw,
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
    await store.log.publish_spans(events)
    await store.log.js.publish(store.topology.rollout_events("ro-poison"), b"\xffnot an event")  # quarantined
    run = [RunStarted(event_id=derive_id(RUN), run_id=RUN, algorithm="grpo", config=msgspec.Raw(b"{}"), at=1.0)]
    for step, (reward, (s_mean, s_max, dropped)) in enumerate(zip(REWARDS, STALENESS, strict=True), start=1):
        version = f"policy:{1 + (step - 1) // 2}"
        batch = [r.rollout_id for r in claimed[(step - 1) // 2 * 2 : (step - 1) // 2 * 2 + 2]] if step % 2 else []
        metrics = {"reward_mean": reward, "reward_std": 0.1, "staleness_mean": s_mean, "staleness_max": s_max}
        run += [
            StepStarted(event_id=derive_id(RUN, "s", step), run_id=RUN, step=step, resources_id=version,
                        rollout_ids=batch, at=1.0 + step),
            StepCompleted(event_id=derive_id(RUN, "c", step), run_id=RUN, step=step, resources_id=f"policy:{step + 1}",
                          metrics={**metrics, "rows_dropped_stale": dropped}, at=1.5 + step),
        ]  # fmt: skip
    for event in run:
        await store.log.append([event])
    return {"shown": rid, "queued": [r.rollout_id for r in queued]}
