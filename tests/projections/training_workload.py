"""Agent-like telemetry for the training tables: runner spans and gateway calls of three-turn tool
conversations (some with a broken prefix), rewards before and after the attempt ends."""

from __future__ import annotations

import json

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.spans import ModelCalled, RewardReported, SpanRecorded
from voltbus.store import EnqueueRolloutRequest, Store

Event = SpanRecorded | ModelCalled | RewardReported


def _span(rid: str, aid: str, n: int, name: str, parent: str | None, attrs: dict) -> SpanRecorded:  # type: ignore[type-arg]
    return SpanRecorded(
        event_id=derive_id(rid, aid, "span", n),
        rollout_id=rid,
        attempt_id=aid,
        sequence_id=n,
        trace_id=derive_id(rid, aid),
        span_id=derive_id(rid, aid, n)[:16],
        parent_id=parent,
        name=name,
        start_time=float(n),
        end_time=float(n),
        attributes=attrs,
    )


def _call(rid: str, aid: str, turn: int, prompt: list[int], response: list[int], version: str) -> ModelCalled:
    body = json.dumps({"id": f"chatcmpl-{rid}-{turn}"}).encode()
    return ModelCalled(
        event_id=derive_id(rid, aid, "call", turn),
        rollout_id=rid,
        attempt_id=aid,
        call_id=f"{rid}-c{turn}",
        resources_id=version,
        model="tiny",
        request=msgspec.Raw(b"{}"),
        response=msgspec.Raw(body),
        prompt_ids=prompt,
        response_ids=response,
        logprobs=[-0.5] * len(response),
        latency_s=0.01,
        at=float(turn),
    )


def conversation(rid: str, aid: str, i: int) -> tuple[list[Event], list[Event], list[Event]]:
    """(gateway calls, runner spans, a late reward): three turns; every fourth attempt breaks the prefix."""
    calls, context, prompts = [], [1, 2, i], []
    for turn in range(3):
        prompt = context if turn != 2 or i % 4 else [9, *context]  # a re-rendered prompt on turn 3
        response = [100 + turn, 200 + i]
        calls.append(_call(rid, aid, turn, prompt, response, f"pol:{1 + (i % 3 == 0 and turn == 2)}"))
        prompts.append((prompt, response))
        context = prompt + response + [50 + turn]  # tool output
    agent = derive_id(rid, aid, 99)[:16]
    spans = [
        _span(rid, aid, 1 + t, "openai.chat.completions.create", agent, {
            "voltbus.llm.response": json.dumps({"id": f"chatcmpl-{rid}-{t}"}),
            "voltbus.llm.prompt_token_ids": p,
            "voltbus.llm.response_token_ids": r,
        })
        for t, (p, r) in enumerate(prompts)
    ]  # fmt: skip
    spans.append(_span(rid, aid, 4, "agentlightning.annotation", agent, {
        "agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": i / 10,
    }))  # fmt: skip
    spans.append(_span(rid, aid, 5, "agent", None, {"agent.name": "solver"}))
    spans[-1] = msgspec.structs.replace(spans[-1], span_id=agent)
    late = [
        RewardReported(
            event_id=derive_id(rid, aid, "late"),
            rollout_id=rid,
            attempt_id=aid,
            value=1.0,
            dimensions={"correct": 1.0, "style": 0.5},
            primary_key="correct",
            at=9.0,
        )
    ]
    return calls, spans, late


async def write(store: Store, rollouts: int) -> None:
    """Claim, record telemetry, end the attempts (succeeded or failed), then late rewards."""
    await store.enqueue_many_rollouts(
        [EnqueueRolloutRequest(input={"task_id": f"t{i % 4}", "q": i}, mode="train") for i in range(rollouts)]
    )
    claimed = await store.dequeue_many_rollouts(limit=rollouts, worker_id="w-1")
    late: list[Event] = []
    for i, r in enumerate(claimed):
        calls, spans, rewards = conversation(r.rollout_id, r.attempt.attempt_id, i)
        await store.log.publish_spans(calls)
        if i % 2:
            await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded" if i % 3 else "failed")
            await store.log.publish_spans(spans)  # the runner's last flush lands after the attempt ended
        else:
            await store.log.publish_spans(spans)
            await store.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
        late += rewards
    await store.log.publish_spans(late)
