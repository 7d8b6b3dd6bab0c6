"""Which calls are found and trained on: agent_match over nested agents, calls outside agents, pairs."""

from __future__ import annotations

from voltbus.projections.adapter import AdapterSettings, adapt

from .trace import Trace


def nested_agents() -> Trace:
    t = Trace()
    planner = t.agent("planner")
    t.llm([1], [2], parent=planner)  # planner's own call
    critic = t.agent("critic", parent=planner)
    t.llm([3], [4], parent=critic)  # a non-matching agent inside the matching one masks its calls
    sub = t.agent("planner-sub", parent=critic)
    t.llm([5], [6], parent=sub)  # a matching agent inside it selects again
    t.llm([7], [8])  # outside any agent
    return t


def test_agent_match_selects_calls_under_matching_agents_only() -> None:
    out = adapt(nested_agents().attempt(), AdapterSettings(agent_match="^planner"))
    assert [(r.prompt_ids, r.agent_name) for r in out.triplets] == [([1], "planner"), ([5], "planner-sub")]
    s = out.summary
    assert (s.calls, s.selected, s.other_agent, s.outside_agent) == (4, 2, 1, 1)


def test_without_agent_match_every_call_is_trained() -> None:
    out = adapt(nested_agents().attempt(), AdapterSettings())
    assert [r.prompt_ids for r in out.triplets] == [[1], [3], [5], [7]]
    assert [r.agent_name for r in out.triplets] == ["planner", "critic", "planner-sub", None]
    assert out.summary.outside_agent == 0


def test_gateway_calls_without_spans_are_outside_any_agent() -> None:
    t = Trace()
    t.gateway([1], [2])
    t.gateway([1, 2, 3], [4])
    assert adapt(t.attempt(), AdapterSettings()).summary.gateway_only == 2
    filtered = adapt(t.attempt(), AdapterSettings(agent_match="x"))
    assert filtered.triplets == [] and filtered.summary.outside_agent == 2


def test_a_call_seen_by_runner_and_gateway_counts_once_with_gateway_tokens() -> None:
    t = Trace()
    agent = t.agent("solver")
    t.llm([1], [99], parent=agent, response_id="chatcmpl-a")  # the runner's view, tokens differ on purpose
    t.gateway([1], [2], call_id="g-1", response_id="chatcmpl-a")
    out = adapt(t.attempt(), AdapterSettings(agent_match="solver"))
    assert [(r.call_id, r.source, r.response_ids, r.agent_name) for r in out.triplets] == [
        ("g-1", "both", [2], "solver")
    ]
    assert (out.summary.calls, out.summary.paired) == (1, 1)


def test_repeated_response_ids_pair_in_order_and_call_id_attribute_wins() -> None:
    t = Trace()
    t.llm([1], [2], response_id="same")
    t.llm([3], [4], response_id="same")
    t.llm([5], [6], extra={"voltbus.llm.call_id": "g-c"})
    t.gateway([1], [20], call_id="g-a", response_id="same")
    t.gateway([3], [40], call_id="g-b", response_id="same")
    t.gateway([5], [60], call_id="g-c", response_id="other")
    out = adapt(t.attempt(), AdapterSettings())
    assert [(r.call_id, r.response_ids) for r in out.triplets] == [("g-a", [20]), ("g-b", [40]), ("g-c", [60])]
    assert out.summary.paired == 3


def test_calls_inside_a_reward_span_and_nested_call_spans_are_not_trained() -> None:
    t = Trace()
    judge = t.span("agentlightning.operation", attributes={"agentlightning.operation.name": "agentlightning.reward"})
    t.llm([1], [2], parent=judge)  # an LLM judge
    outer = t.llm([3], [4])
    t.span("openai.chat.completions.create", parent=outer)  # a second instrumentation of the same call
    out = adapt(t.attempt(), AdapterSettings())
    assert [r.prompt_ids for r in out.triplets] == [[3]]
    assert (out.summary.in_reward, out.summary.nested) == (1, 1)
    kept = adapt(t.attempt(), AdapterSettings(exclude_calls_in_reward=False))
    assert [r.prompt_ids for r in kept.triplets] == [[1], [3]]


def test_failed_calls_are_flagged_and_take_no_reward() -> None:
    t = Trace()
    t.gateway([1], [2])
    t.gateway([1], [], status="error")
    t.reward_event(1.0)
    out = adapt(t.attempt(), AdapterSettings())
    assert [(r.call_failed, r.reward) for r in out.triplets] == [(False, 1.0), (True, None)]
    assert out.summary.failed == 1 and len(out.trajectories) == 1
