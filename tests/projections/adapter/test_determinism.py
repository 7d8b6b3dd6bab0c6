"""Same rows in any arrival order give identical output; invariants hold on random traces."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import voltbus.projections.adapter as adapter
from voltbus.projections.adapter import AdapterSettings, adapt, parse_settings, settings_id

from .trace import Trace

OPS = st.lists(
    st.tuples(
        st.sampled_from(["agent", "llm", "reward", "gateway", "paired", "reward_event", "bad_reward", "no_ids", "dup"]),
        st.integers(0, 50),
        st.integers(0, 3),
    ),
    max_size=30,
)
ALL_SETTINGS = [
    AdapterSettings(reward_policy=p, aggregation=a, gamma=g, agent_match=m)  # type: ignore[arg-type]
    for p in ("first_occurrence", "first_sibling", "final_to_last", "per_call")
    for a, g, m in (("trajectory", 1.0, None), ("call", 0.9, "^a[01]"))
]


def build(ops: list[tuple[str, int, int]]) -> Trace:
    """A random but well-formed trace: prompts often extend the last context, sometimes not."""
    t, parents, context, calls = Trace(), [None], [1], []
    for kind, pick, n in ops:
        parent = parents[pick % len(parents)]
        response = [100 + pick, 200 + n][: n % 2 + 1]
        prompt = context + [n] * (pick % 3) if pick % 5 else [7, pick]
        if kind == "agent":
            parents.append(t.agent(f"a{n}", parent))
        elif kind in ("llm", "paired"):
            t.llm(prompt, response, parent, response_id=f"r{len(calls)}" if kind == "paired" else None)
            if kind == "paired":
                calls.append(t.gateway(prompt, response, response_id=f"r{len(calls)}"))
            context = prompt + response
        elif kind == "gateway":
            calls.append(t.gateway(prompt, response))
            context = prompt + response
        elif kind == "dup" and t.spans:  # the same span stored twice, under another sequence id
            again = t.spans[pick % len(t.spans)]
            t.n += 1
            t.spans.append(msgspec.structs.replace(again, seq=t.n, sequence_id=t.n, name=f"{again.name}{n}"))
        elif kind == "no_ids":
            t.gateway([], [])
        elif kind == "reward":
            t.reward(pick / 10, parent)
        elif kind == "bad_reward":
            t.reward("high", parent)
        else:
            t.reward_event(n / 3, call_id=calls[pick % len(calls)] if calls and pick % 2 else None)
    return t


def shuffled(t: Trace, seed: int) -> Trace:
    rng = random.Random(seed)
    copy = Trace()
    copy.spans, copy.calls, copy.rewards = list(t.spans), list(t.calls), list(t.rewards)
    for rows in (copy.spans, copy.calls, copy.rewards):
        rng.shuffle(rows)
    return copy


@settings(max_examples=150, deadline=None)
@given(OPS, st.integers(0, 2**32))
def test_arrival_order_does_not_change_the_output(ops: list[tuple[str, int, int]], seed: int) -> None:
    trace = build(ops)
    for s in ALL_SETTINGS:
        first = msgspec.json.encode(adapt(trace.attempt(), s))
        assert msgspec.json.encode(adapt(shuffled(trace, seed).attempt(), s)) == first


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_rows_are_aligned_and_every_reward_is_accounted_for(ops: list[tuple[str, int, int]]) -> None:
    trace = build(ops)
    for s in ALL_SETTINGS:
        out = adapt(trace.attempt(), s)
        for row in out.trajectories:
            assert len(row.response_mask) == len(row.response_ids) > 0
            assert row.logprobs is None or len(row.logprobs) == len(row.response_ids)
            assert len(row.call_ids) == len(row.call_rewards) == len(row.call_resources)
        given_rewards = sum(r.reward is not None or r.reward_not_numeric for r in out.triplets)
        sm = out.summary
        assert given_rewards + sm.rewards_unmatched + sm.rewards_unused == sm.rewards
        stitched = sum(len(r.call_ids) for r in out.trajectories)
        trainable = sum(not (r.no_token_ids or r.call_failed) for r in out.triplets)
        assert stitched == trainable
        assert sm.selected + sm.outside_agent + sm.other_agent + sm.in_reward + sm.nested == sm.calls


def test_settings_id_is_stable_and_unknown_keys_are_refused() -> None:
    assert settings_id(AdapterSettings()) == settings_id(parse_settings("{}"))
    assert len({settings_id(s) for s in ALL_SETTINGS}) == len(ALL_SETTINGS)
    with pytest.raises(msgspec.ValidationError):
        parse_settings('{"reward_polcy": "per_call"}')


def test_exports_are_sorted_and_resolve() -> None:
    assert adapter.__all__ == sorted(adapter.__all__)
    assert [n for n in adapter.__all__ if not hasattr(adapter, n)] == []


@pytest.mark.parametrize(
    "name", sorted(m.name for m in pkgutil.iter_modules(adapter.__path__, "voltbus.projections.adapter."))
)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0
