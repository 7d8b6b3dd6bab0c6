"""Reward matching under each policy, rewards before/between/after calls, dimensions, discounting."""

from __future__ import annotations

import pytest

from voltbus.projections.adapter import AdapterSettings, adapt

from .trace import Trace


def before_between_after() -> Trace:
    """R0 before any call, R1 between calls, R2 and R3 after the last call; R4 names call 2."""
    t = Trace()
    t.reward(0.1)
    t.gateway([1], [2], call_id="c1")
    t.reward(0.2)
    t.gateway([1, 2, 3], [4], call_id="c2")
    t.gateway([1, 2, 3, 4, 5], [6], call_id="c3")
    t.reward(0.3)
    t.reward(0.4)
    t.reward_event(0.9, call_id="c2")
    return t


def rewards(policy: str, **kw: object) -> tuple[list[float | None], tuple[int, int]]:
    out = adapt(before_between_after().attempt(), AdapterSettings(reward_policy=policy, **kw))  # type: ignore[arg-type]
    return [r.reward for r in out.triplets], (out.summary.rewards_unmatched, out.summary.rewards_unused)


def test_first_occurrence_goes_to_the_latest_free_earlier_call() -> None:
    # c2 is taken by the reward naming it, so 0.3 goes to c3 and 0.4 back-fills past c2 to... nothing free after c1
    assert rewards("first_occurrence") == ([0.2, 0.9, 0.3], (2, 0))


def test_first_sibling_only_reaches_calls_under_the_same_parent() -> None:
    t = Trace()
    agent = t.agent("a")
    t.llm([1], [2], parent=agent)
    t.reward(0.5, parent=agent)
    t.llm([1, 2, 3], [4], parent=agent)
    t.reward(1.0)  # at the root: no sibling call
    sibling = adapt(t.attempt(), AdapterSettings(reward_policy="first_sibling"))
    assert [r.reward for r in sibling.triplets] == [0.5, None]
    assert sibling.summary.rewards_unmatched == 1
    occurrence = adapt(t.attempt(), AdapterSettings(reward_policy="first_occurrence"))
    assert [r.reward for r in occurrence.triplets] == [0.5, 1.0]


def test_final_to_last_uses_the_last_reward_only() -> None:
    assert rewards("final_to_last") == ([None, None, 0.9], (0, 4))


def test_per_call_uses_only_rewards_naming_their_call() -> None:
    assert rewards("per_call") == ([None, 0.9, None], (0, 4))


@pytest.mark.parametrize("policy", ["first_occurrence", "first_sibling", "final_to_last", "per_call"])
def test_every_reward_is_given_unmatched_or_unused(policy: str) -> None:
    out = adapt(before_between_after().attempt(), AdapterSettings(reward_policy=policy))  # type: ignore[arg-type]
    given = sum(r.reward is not None for r in out.triplets)
    s = out.summary
    assert given + s.rewards_unmatched + s.rewards_unused == s.rewards == 5


def test_discounted_returns_spread_the_final_reward_backwards() -> None:
    t = Trace()
    for n in range(3):
        t.gateway(list(range(2 * n + 1)), [2 * n + 1])
    t.reward_event(1.0)
    out = adapt(t.attempt(), AdapterSettings(reward_policy="final_to_last", gamma=0.5))
    assert [r.return_value for r in out.triplets] == [0.25, 0.5, 1.0]
    assert [r.reward_missing for r in out.triplets] == [False, False, False]
    assert [r.reward for r in out.trajectories] == [0.25]  # one stitched row: the return at its first call
    plain = adapt(t.attempt(), AdapterSettings(reward_policy="first_occurrence"))
    assert [(r.reward, r.return_value) for r in plain.triplets] == [(None, 1.0), (None, 1.0), (1.0, 1.0)]


def test_multi_dimensional_rewards_keep_their_dimensions_and_primary() -> None:
    t = Trace()
    t.gateway([1], [2])
    t.reward(None, dims={"correct": 1.0, "format": 0.5})  # primary is the first dimension
    t.gateway([1, 2, 3], [4])
    t.reward_event(None, dimensions={"correct": 0.0, "format": 1.0, "length": 0.2}, primary_key="format")
    out = adapt(t.attempt(), AdapterSettings(gamma=1.0))
    assert [r.reward for r in out.triplets] == [1.0, 1.0]
    assert out.triplets[0].dimensions == {"correct": 1.0, "format": 1.5, "length": 0.2}
    assert out.triplets[1].dimensions == {"correct": 0.0, "format": 1.0, "length": 0.2}


def test_a_reward_that_is_not_a_number_is_flagged_not_coerced() -> None:
    t = Trace()
    t.gateway([1], [2])
    t.reward("0.7")
    t.gateway([5], [6])
    t.reward(float("nan"))
    out = adapt(t.attempt(), AdapterSettings())
    assert [(r.reward, r.reward_not_numeric, r.reward_missing) for r in out.triplets] == [
        (None, True, True),
        (None, True, True),
    ]
    assert out.summary.rewards_not_numeric == 2
    assert [r.reward_not_numeric for r in out.trajectories] == [True, True]


def test_the_runners_copy_of_a_reward_span_counts_once() -> None:
    t = Trace()
    t.gateway([1], [2])
    span = t.reward(1.0)
    t.runner_copy(span, 1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert (out.summary.rewards, out.summary.reward_copies_dropped, out.summary.rewards_unmatched) == (1, 1, 0)


def test_gateway_reward_events_land_after_the_runner_call_they_follow() -> None:
    t = Trace()
    t.gateway([1], [2], response_id="r1")
    t.reward_event(0.5)  # reported between the two calls, by the gateway's stream order
    t.gateway([1, 2, 3], [4], response_id="r2")
    t.reward_event(1.0)
    t.llm([1], [2], response_id="r1")  # the runner flushes its spans later, with later sequence ids
    t.llm([1, 2, 3], [4], response_id="r2")
    out = adapt(t.attempt(), AdapterSettings())
    assert [r.reward for r in out.triplets] == [0.5, 1.0]
    assert out.summary.paired == 2


def test_unpaired_gateway_calls_follow_the_spans_stored_before_them() -> None:
    t = Trace()
    t.gateway([1], [2])
    t.reward(0.5)  # a runner reward span, stored between the two gateway calls
    t.gateway([1, 2, 3], [4])
    t.reward(1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert [r.reward for r in out.triplets] == [0.5, 1.0]
