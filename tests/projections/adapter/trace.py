"""A tiny builder of hand-made attempt traces: spans, gateway calls and reward events in sequence order."""

from __future__ import annotations

import json
from typing import Any

from voltbus.projections.adapter import AttemptInput, CallRow, RewardRow, SpanRow
from voltbus.schemas.base import derive_id

RID, AID = "ro-1", "at-1"


class Trace:
    """Items get sequence ids (spans) and stream positions (everything) in the order they are added."""

    def __init__(self) -> None:
        self.spans: list[SpanRow] = []
        self.calls: list[CallRow] = []
        self.rewards: list[RewardRow] = []
        self.n = 0

    def _next(self) -> int:
        self.n += 1
        return self.n

    def span(self, name: str, parent: str | None = None, attributes: dict[str, Any] | None = None, **kw: Any) -> str:
        n = self._next()
        span_id = kw.pop("span_id", f"{n:016x}")
        row = SpanRow(seq=n, sequence_id=n, span_id=span_id, parent_id=parent, name=name, attributes=attributes or {})
        self.spans.append(row)
        return span_id

    def agent(self, name: str, parent: str | None = None) -> str:
        return self.span("agent.run", parent, {"agent.name": name})

    def llm(
        self,
        prompt: list[int],
        response: list[int],
        parent: str | None = None,
        logprobs: list[float] | None = None,
        response_id: str | None = None,
        extra: dict[str, Any] | None = None,
        resources_id: str | None = None,
    ) -> str:
        attrs: dict[str, Any] = {"voltbus.llm.prompt_token_ids": prompt, "voltbus.llm.response_token_ids": response}
        attrs["voltbus.llm.logprobs"] = logprobs if logprobs is not None else [-0.5] * len(response)
        body = {"id": response_id, "resources_id": resources_id}
        attrs["voltbus.llm.response"] = json.dumps({k: v for k, v in body.items() if v is not None})
        return self.span("openai.chat.completions.create", parent, {**attrs, **(extra or {})})

    def reward(self, value: Any, parent: str | None = None, dims: dict[str, Any] | None = None) -> str:
        pairs = [("primary", value)] if dims is None else list(dims.items())
        attrs: dict[str, Any] = {}
        for i, (name, v) in enumerate(pairs):
            attrs[f"agentlightning.reward.{i}.name"] = name
            attrs[f"agentlightning.reward.{i}.value"] = v
        return self.span("agentlightning.annotation", parent, attrs)

    def gateway(
        self,
        prompt: list[int],
        response: list[int],
        call_id: str | None = None,
        response_id: str | None = None,
        resources_id: str | None = "pol:1",
        status: str = "ok",
    ) -> str:
        n = self._next()
        call_id = call_id or f"call-{n}"
        body = json.dumps({"id": response_id} if response_id else {})
        self.calls.append(
            CallRow(
                seq=n,
                call_id=call_id,
                resources_id=resources_id,
                model="m",
                response=body,
                prompt_ids=prompt,
                response_ids=response,
                logprobs=[-0.25] * len(response),
                status=status,
            )
        )
        return call_id

    def reward_event(self, value: float | None, **kw: Any) -> str:
        n = self._next()
        event_id = kw.pop("event_id", f"ev-{n}")
        self.rewards.append(RewardRow(seq=n, event_id=event_id, value=value, **kw))
        return event_id

    def runner_copy(self, span_id: str, value: float) -> None:
        """The ``RewardReported`` the runner writes for a reward span."""
        self.reward_event(value, event_id=derive_id(RID, AID, "reward", span_id))

    def attempt(self) -> AttemptInput:
        return AttemptInput(
            rollout_id=RID,
            attempt_id=AID,
            task_id="task-1",
            mode="train",
            spans=list(self.spans),
            calls=list(self.calls),
            rewards=list(self.rewards),
        )
