"""The model calls of an attempt: runner-side call spans found in the tree, gateway calls, each counted once.

A call seen both ways (the runner's client span and the gateway's ``ModelCalled``) is paired by the
span's ``voltbus.llm.call_id`` attribute when present, else by the response id (the body's ``id``);
equal ids pair in order of occurrence, so an engine that repeats ids never merges distinct calls.
The pair takes the span's place in the tree and the gateway's tokens.

A gateway call or reward event without a span has no sequence id; it is placed directly under the
root, after every span stored before it in the stream (a stored span had ended) and after the last
paired call before it, and before everything else. Spans are stored in batches (every 0.2 s), so a
span stored after a gateway row may have ended before it: such an order cannot be known without a
sequence id on ``ModelCalled``. An LLM span inside another LLM span is the same call seen
by a second instrumentation and is counted ``nested``, never trained.
"""

from __future__ import annotations

import collections
import re
from typing import Literal

import msgspec

from .inputs import AttemptInput, CallRow, RewardRow, SpanRow
from .rewards import Reward, copied_rows, row_reward, span_reward
from .sampled import Sampled, from_call, from_span, merged
from .settings import AdapterSettings
from .tree import ROOT, Key, Node, Tree, agent_name

Scope = Literal["selected", "outside_agent", "other_agent", "in_reward", "nested"]
"""Why a call is (``selected``) or is not trained on."""


class Call(msgspec.Struct, frozen=True, kw_only=True):
    """One model call with its place in the attempt."""

    key: Key
    """Its place in the attempt's order."""
    parent: str
    """Parent span id (``ROOT`` for gateway calls without a span)."""
    call_id: str
    """The gateway's call id, or the span id for a call only the runner saw."""
    source: Literal["gateway", "span", "both"]
    """Who recorded it."""
    agent: str | None
    """Nearest enclosing agent name."""
    scope: Scope
    """Whether it is trained on, and why not."""
    sampled: Sampled
    """Tokens, logprobs and version."""


class Found(msgspec.Struct, frozen=True, kw_only=True):
    """Calls and rewards of an attempt, in order."""

    calls: list[Call]
    """Every call, any scope."""
    rewards: list[Reward]
    """Every reward, copies removed."""
    copies_dropped: int = 0
    """``RewardReported`` rows that repeated a reward span."""


def _is_barrier(node: Node, reward: Reward | None) -> bool:
    span = node.span
    operation = span is not None and span.attributes.get("agentlightning.operation.name") == "agentlightning.reward"
    return reward is not None or operation


def _scan(tree: Tree, settings: AdapterSettings) -> tuple[list[Call], list[Reward]]:
    """Call spans (with scope) and reward spans, by Agent Lightning 0.3's ``find_llm_calls`` rules."""
    llm = re.compile(settings.llm_call_match)
    agents = re.compile(settings.agent_match) if settings.agent_match is not None else None
    calls: list[Call] = []
    rewards: list[Reward] = []
    stack: list[tuple[Node, str | None, bool, bool, bool]] = [(tree.root, None, agents is None, False, False)]
    while stack:
        node, agent, matched, in_reward, in_call = stack.pop()
        is_call, reward = False, span_reward(node)
        if node.span is not None:
            rewards += [reward] if reward else []
            if name := agent_name(node.span):
                agent, matched = name, agents is None or agents.search(name) is not None
            if is_call := llm.search(node.span.name) is not None:
                scope = _scope(agent, matched, in_reward, in_call)
                sampled = from_span(node.span)
                calls.append(Call(key=node.key, parent=node.parent or ROOT, call_id=node.span.span_id,
                                  source="span", agent=agent, scope=scope, sampled=sampled))  # fmt: skip
        in_reward = in_reward or (settings.exclude_calls_in_reward and _is_barrier(node, reward))
        stack += [(c, agent, matched, in_reward, in_call or is_call) for c in reversed(node.children)]
    return calls, rewards


def _scope(agent: str | None, matched: bool, in_reward: bool, in_call: bool) -> Scope:
    if in_call:
        return "nested"
    if in_reward:
        return "in_reward"
    if matched:
        return "selected"
    return "other_agent" if agent is not None else "outside_agent"


def _pair(spans: list[Call], rows: list[CallRow]) -> dict[str, Call]:
    """Gateway call id -> the span call it pairs with."""
    by_call_id = {r.call_id: r for r in rows}
    pairs: dict[str, Call] = {}
    rest = []
    for span in spans:
        cid = span.sampled.call_id
        if cid in by_call_id and cid not in pairs:
            pairs[cid] = span
        else:
            rest.append(span)
    waiting: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
    for row in rows:
        if row.call_id not in pairs and (rid := from_call(row).response_id):
            waiting[rid].append(row.call_id)
    for span in rest:
        if (rid := span.sampled.response_id) and waiting[rid]:
            pairs[waiting[rid].popleft()] = span
    return pairs


def _timeline(
    spans: list[SpanRow], rows: list[CallRow], events: list[RewardRow]
) -> list[tuple[tuple[int, int], SpanRow | CallRow | RewardRow]]:
    """Every row by stream position (sequence, place in its message: unique within the stream)."""
    items: list[tuple[tuple[int, int], SpanRow | CallRow | RewardRow]] = [(_at(r), r) for r in [*spans, *rows, *events]]
    return sorted(items, key=lambda p: p[0])


def _at(row: SpanRow | CallRow | RewardRow) -> tuple[int, int]:
    return row.seq, row.seq_index


def find(attempt: AttemptInput, tree: Tree, settings: AdapterSettings) -> Found:
    """Every call and reward of the attempt, pairs merged and gateway rows placed, sorted by order."""
    span_calls, rewards = _scan(tree, settings)
    rows = sorted(attempt.calls, key=_at)
    pairs = _pair(sorted((c for c in span_calls if c.scope != "nested"), key=lambda c: c.key), rows)
    paired_spans = {id(c) for c in pairs.values()}
    calls = [c for c in span_calls if id(c) not in paired_spans]
    copies = copied_rows(attempt, [r.span_id for r in rewards if r.span_id])
    events = [r for r in attempt.rewards if r.event_id not in copies]
    selected = settings.agent_match is None
    anchor = 0
    for (seq, index), row in _timeline(attempt.spans, rows, events):
        if isinstance(row, SpanRow):
            anchor = max(anchor, row.sequence_id)
        elif isinstance(row, CallRow) and row.call_id in pairs:
            span = pairs[row.call_id]
            anchor = max(anchor, span.key[0])
            calls.append(msgspec.structs.replace(span, call_id=row.call_id, source="both",
                                                 sampled=merged(from_call(row), span.sampled)))  # fmt: skip
        elif isinstance(row, CallRow):
            scope: Scope = "selected" if selected else "outside_agent"
            calls.append(Call(key=(anchor, 1, seq, index), parent=ROOT, call_id=row.call_id, source="gateway",
                              agent=None, scope=scope, sampled=from_call(row)))  # fmt: skip
        else:
            rewards.append(row_reward(row, (anchor, 1, seq, index)))
    calls.sort(key=lambda c: c.key)
    rewards.sort(key=lambda r: r.key)
    return Found(calls=calls, rewards=rewards, copies_dropped=len(attempt.rewards) - len(events))
