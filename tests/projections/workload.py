"""A mixed, deterministic workload written through the real store: every table gets rows."""

from __future__ import annotations

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.gateway import GatewayPaused, GatewayResumed
from voltbus.schemas.resources import LLM, PromptTemplate
from voltbus.schemas.rollouts import ErrorInfo, RolloutConfig
from voltbus.schemas.spans import ModelCalled, RewardReported, SampledChoice, SpanRecorded, SpanStatus, Usage
from voltbus.schemas.training import RunFinished, RunStarted, StepCompleted, StepStarted
from voltbus.store import EnqueueRolloutRequest, Store


def telemetry(rollout_id: str, attempt_id: str, n: int) -> list[SpanRecorded | ModelCalled | RewardReported]:
    """A span, a model call and a reward of one attempt."""
    raw = msgspec.Raw(b'{"messages":[]}')
    return [
        SpanRecorded(
            event_id=derive_id(rollout_id, attempt_id, "s", n),
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=n + 1,
            trace_id=f"{n:032x}",
            span_id=f"{n:016x}",
            name="llm.call",
            start_time=n,
            end_time=n + 0.5,
            attributes={"n": n},
            status=SpanStatus(status_code="OK"),
        ),
        ModelCalled(
            event_id=derive_id(rollout_id, attempt_id, "c", n),
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            call_id=f"c{n}",
            model="tiny",
            request=raw,
            response=raw,
            prompt_ids=[1, 2, n],
            response_ids=[n, 3],
            logprobs=[-0.5, -0.25],
            latency_s=0.01,
            usage=Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5),
            at=n,
            mode="train",
            rewritten=["temperature"],
            status="error" if n % 5 == 4 else "ok",
            error=ErrorInfo(type="UpstreamTimeout", message="engine timed out") if n % 5 == 4 else None,
            choices=[SampledChoice(index=i, response_ids=[n, i], logprobs=[-0.5, -0.1]) for i in range(n % 2 * 2)],
        ),
        RewardReported(
            event_id=derive_id(rollout_id, attempt_id, "r", n),
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            value=float(n % 3),
            dimensions={"ok": 1.0},
            at=n,
        ),
    ]


async def write(store: Store, rollouts: int, tag: str = "w") -> list[str]:
    """Resources, rollouts in every state, workers, telemetry and a training run; returns rollout ids."""
    await store.add_resources(
        {"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="tiny"), "prompt": PromptTemplate(template="Q: {q}")}
    )
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    queued = await store.enqueue_many_rollouts(
        [EnqueueRolloutRequest(input={"i": i}, config=config) for i in range(rollouts)]
    )
    claimed = await store.dequeue_many_rollouts(limit=rollouts * 3 // 4, worker_id=f"{tag}-1")
    spans = []
    for i, r in enumerate(claimed):
        if i % 2:  # as a runner's flush: one SpanBatch message
            await store.log.publish_spans(telemetry(r.rollout_id, r.attempt.attempt_id, i), batch=True)
        else:  # as the gateway and the store's add_span: a message per event
            spans += telemetry(r.rollout_id, r.attempt.attempt_id, i)
        if i % 3 == 0:
            await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
        elif i % 3 == 1:
            await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="failed")
    await store.log.publish_spans(spans)
    if queued:
        await store.cancel_rollout(queued[-1].rollout_id, reason="enough")
    await store.update_worker(f"{tag}-1", {"cpu_usage_pct": 12.5})
    run = f"run-{tag}"
    await store.log.append(
        [
            RunStarted(
                event_id=derive_id(run), run_id=run, algorithm="grpo", config=msgspec.Raw(b'{"lr":0.0001}'), at=1.0
            )
        ]
    )
    started = StepStarted(event_id=derive_id(run, "s1"), run_id=run, step=1, rollout_ids=["ro-1", "ro-2"], at=1.5)
    await store.log.append([started])
    await store.log.append(
        [StepCompleted(event_id=derive_id(run, 1), run_id=run, step=1, metrics={"reward/mean": 0.5}, at=2.0)]
    )
    await store.log.append([RunFinished(event_id=derive_id(run, "end"), run_id=run, status="succeeded", at=3.0)])
    gateway = f"gw-{tag}"
    paused = GatewayPaused(event_id=derive_id(gateway, 1), gateway_id=gateway, retry_after_s=5, inflight=2, at=4.0)
    await store.log.append([paused])
    await store.log.append(
        [
            GatewayResumed(
                event_id=derive_id(gateway, 2),
                gateway_id=gateway,
                paused_s=1.0,
                at=5.0,
                versions={"http://gpu-1:8000": "policy:2", "http://gpu-2:8000": None},
            )
        ]
    )
    return [r.rollout_id for r in queued]
