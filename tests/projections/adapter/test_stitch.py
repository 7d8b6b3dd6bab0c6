"""Trajectories: a token-exact three-turn tool conversation is one row; a broken prefix is two."""

from __future__ import annotations

from voltbus.projections.adapter import AdapterSettings, adapt

from .trace import Trace

P1, R1 = [1, 2, 3], [10, 11]
OBS1 = [20, 21]  # tool output tokens
R2 = [12]
OBS2 = [22]
R3 = [13, 14]
P2 = P1 + R1 + OBS1
P3 = P2 + R2 + OBS2


def three_turns(p3: list[int] = P3, versions: tuple[str, str, str] = ("pol:1", "pol:1", "pol:1")) -> Trace:
    t = Trace()
    agent = t.agent("tool-user")
    t.llm(P1, R1, parent=agent, logprobs=[-0.1, -0.2], resources_id=versions[0])
    t.span("tool.call", parent=agent)
    t.llm(P2, R2, parent=agent, logprobs=[-0.3], resources_id=versions[1])
    t.span("tool.call", parent=agent)
    t.llm(p3, R3, parent=agent, logprobs=[-0.4, -0.5], resources_id=versions[2])
    t.reward(1.0, parent=agent)
    return t


def test_exact_prefix_chain_is_one_row_with_observations_masked() -> None:
    out = adapt(three_turns().attempt(), AdapterSettings())
    assert len(out.trajectories) == 1
    row = out.trajectories[0]
    assert row.prompt_ids == P1
    assert row.response_ids == R1 + OBS1 + R2 + OBS2 + R3
    assert row.response_mask == [1, 1, 0, 0, 1, 0, 1, 1]
    assert row.logprobs == [-0.1, -0.2, 0.0, 0.0, -0.3, 0.0, -0.4, -0.5]
    assert (row.reward, row.call_rewards, row.after_mismatch) == (1.0, [None, None, 1.0], False)
    assert (row.resources_ids, row.mixed_versions) == (["pol:1"], False)
    assert out.summary.prefix_mismatches == 0


def test_a_broken_prefix_starts_a_new_row_and_counts_one_mismatch() -> None:
    retokenized = P2 + [99] + OBS2  # the third prompt does not carry the second response's exact tokens
    out = adapt(three_turns(p3=retokenized).attempt(), AdapterSettings())
    assert [r.response_mask for r in out.trajectories] == [[1, 1, 0, 0, 1], [1, 1]]
    assert [r.prompt_ids for r in out.trajectories] == [P1, retokenized]
    assert [r.after_mismatch for r in out.trajectories] == [False, True]
    assert out.summary.prefix_mismatches == 1
    assert [r.reward for r in out.trajectories] == [1.0, 1.0]  # the return at each row's first call


def test_call_aggregation_gives_one_row_per_call() -> None:
    out = adapt(three_turns().attempt(), AdapterSettings(aggregation="call"))
    assert [r.prompt_ids for r in out.trajectories] == [P1, P2, P3]
    assert out.summary.prefix_mismatches == 0 and len(out.triplets) == 3


def test_a_row_spanning_versions_says_so() -> None:
    out = adapt(three_turns(versions=("pol:1", "pol:2", "pol:2")).attempt(), AdapterSettings())
    row = out.trajectories[0]
    assert (row.call_resources, row.resources_ids, row.mixed_versions) == (
        ["pol:1", "pol:2", "pol:2"],
        ["pol:1", "pol:2"],
        True,
    )
    assert out.summary.resources_ids == ["pol:1", "pol:2"]


def test_calls_without_token_ids_are_flagged_and_never_stitched() -> None:
    t = Trace()
    t.gateway(P1, R1)
    t.gateway([], [])  # an engine that returned no token ids
    t.gateway(P3, R3)
    t.reward_event(1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert [r.no_token_ids for r in out.triplets] == [False, True, False]
    assert [r.prompt_ids for r in out.trajectories] == [P1, P3]
    assert out.summary.no_token_ids == 1 and out.summary.prefix_mismatches == 0


def test_missing_logprobs_null_the_row_and_long_rows_are_cut_and_flagged() -> None:
    t = Trace()
    t.llm(P1, R1, logprobs=[-0.1])  # one logprob for two tokens: misaligned
    t.llm(P2, R2)
    out = adapt(t.attempt(), AdapterSettings(max_response_length=3, max_prompt_length=2))
    row = out.trajectories[0]
    assert (row.logprobs, row.no_logprobs) == (None, True)
    assert (row.response_ids, row.response_mask, row.truncated, row.overlong_prompt) == (
        R1 + OBS1[:1],
        [1, 1, 0],
        True,
        True,
    )
    assert [r.no_logprobs for r in out.triplets] == [True, False]
