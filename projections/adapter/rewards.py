"""Rewards of an attempt, read from reward spans and from ``RewardReported`` rows, each counted once.

Span formats read (Agent Lightning 0.3's ``get_reward_value`` order): ``agentlightning.reward.<i>.name``
/ ``.value`` (dimension 0 is primary), AgentOps' ``{"type": "reward", "value": v}`` output, and the
v0.2 ``reward`` attribute on an annotation span. The runner copies every reward span into a
``RewardReported`` whose event id is ``derive_id(rollout, attempt, "reward", span_id)``; that copy is
dropped (the span keeps its place in the tree). A value that is not a finite number is kept as a
reward with no value and flagged ``not_numeric``, never coerced.
"""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import msgspec

from voltbus.schemas.base import derive_id

from .inputs import AttemptInput, RewardRow, SpanRow
from .tree import ROOT, Key, Node

_PREFIX = "agentlightning.reward."


class Reward(msgspec.Struct, frozen=True, kw_only=True):
    """One reward with its place in the attempt."""

    key: Key
    """Its place in the attempt's order."""
    parent: str
    """Parent span id (``ROOT`` for rewards not recorded as spans)."""
    value: float | None
    """The primary scalar; None when absent or not a number."""
    dimensions: dict[str, float] = {}
    """Named numeric components."""
    primary_key: str | None = None
    """Name of the primary dimension."""
    call_id: str | None = None
    """The call it names, if any."""
    not_numeric: bool = False
    """A reward was given but its primary value is not a finite number."""
    source: Literal["span", "event"] = "span"
    """Where it was read from."""
    span_id: str | None = None
    """The reward span's id, when read from a span."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool | int | float) and math.isfinite(float(value)):
        return float(value)
    return None


def _dimensions(attributes: dict[str, Any]) -> list[tuple[str, Any]] | None:
    """``agentlightning.reward.<i>.name/value`` pairs in index order, or None when absent."""
    parts: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(_PREFIX):
            index, _, field = key[len(_PREFIX) :].partition(".")
            if index.isdigit():
                parts.setdefault(int(index), {})[field] = value
    if not parts:
        return None
    return [(str(parts[i].get("name", i)), parts[i].get("value")) for i in sorted(parts)]


def _legacy_value(span: SpanRow) -> tuple[bool, Any]:
    for key in ("agentops.task.output", "agentops.entity.output"):
        output = span.attributes.get(key)
        if isinstance(output, str):
            try:
                output = json.loads(output)
            except json.JSONDecodeError:
                continue
        if isinstance(output, dict) and output.get("type") == "reward":
            return True, output.get("value")
    if span.name in ("agentlightning.annotation", "agentlightning.reward") and "reward" in span.attributes:
        return True, span.attributes["reward"]
    return False, None


def span_reward(node: Node) -> Reward | None:
    """The reward a span node carries, or None when it is not a reward span."""
    span = node.span
    if span is None:
        return None
    pairs = _dimensions(span.attributes)
    if pairs is None:
        found, raw = _legacy_value(span)
        if not found:
            return None
        pairs = [("primary", raw)]
    dims = {name: v for name, raw in pairs if (v := _number(raw)) is not None}
    value = _number(pairs[0][1])
    parent = node.parent or ROOT
    return Reward(
        key=node.key,
        parent=parent,
        value=value,
        dimensions=dims,
        primary_key=pairs[0][0],
        not_numeric=value is None,
        span_id=span.span_id,
    )


def row_reward(row: RewardRow, key: Key) -> Reward:
    """A ``RewardReported`` row as a reward at ``key`` under the root."""
    value = row.value if row.value is not None else row.dimensions.get(row.primary_key or "")
    value = _number(value)
    dims = {k: v for k, raw in row.dimensions.items() if (v := _number(raw)) is not None}
    return Reward(
        key=key,
        parent=ROOT,
        value=value,
        dimensions=dims,
        primary_key=row.primary_key,
        call_id=row.call_id,
        not_numeric=value is None,
        source="event",
    )


def copied_rows(attempt: AttemptInput, reward_span_ids: list[str]) -> set[str]:
    """Event ids of the ``RewardReported`` rows the runner copied from these reward spans."""
    return {derive_id(attempt.rollout_id, attempt.attempt_id, "reward", s) for s in reward_span_ids}
