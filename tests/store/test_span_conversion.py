"""The runner's span conversion keeps its meaning on its short cuts: a span that fits is left as it is only when
the value-by-value clipping would leave it so, OpenTelemetry attributes become plain dicts, and reward spans
are told from the others."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from tests.agent.test_emitters import store_span
from voltbus.services.clients.store.limits import MAX_KEY, clip_span, clipped, fits
from voltbus.services.clients.store.spans import reward_event, span_from_otel
from voltbus.services.clients.telemetry.emitters import get_rewards_from_span
from voltbus.store import Span

VALUES = st.one_of(
    st.text(max_size=120),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.lists(st.text(max_size=20), max_size=5),
)
KEYS = st.one_of(st.text(min_size=1, max_size=12), st.text(min_size=MAX_KEY - 2, max_size=MAX_KEY + 3))


def span(attributes: dict[str, Any]) -> Span:
    return store_span("n", attributes)


@settings(max_examples=300, deadline=None)
@given(
    attributes=st.dictionaries(KEYS, VALUES, max_size=12),
    value_max=st.integers(64, 400),
    span_max=st.integers(64, 1500),
)
def test_the_short_cut_leaves_a_span_only_where_clipping_would(
    attributes: dict[str, Any], value_max: int, span_max: int
) -> None:
    s = span(attributes)
    slow = clipped(s, value_max, span_max)
    assert clip_span(s, value_max, span_max) == slow
    if fits(s, min(value_max, span_max)):
        assert slow is s  # nothing was cut or left out


def test_a_span_past_the_limits_is_still_cut_and_one_that_is_not_json_goes_the_long_way() -> None:
    s = span({"big": "x" * 500, "small": "y"})
    cut = clip_span(s, 100, 10_000)
    assert cut.attributes["voltbus.truncated"] == ["big"] and cut.attributes["small"] == "y"
    odd = span({"k": object()})  # type: ignore[dict-item]
    assert fits(odd, 10_000) is False


def test_opentelemetry_spans_become_plain_attribute_dicts_each_their_own() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "tags": ["a", "b"]}))
    tracer = provider.get_tracer("t")
    made = []
    for i in range(2):
        with tracer.start_as_current_span(f"s{i}") as otel:
            otel.set_attributes({"seq": (1, 2, 3), "name": "x"})
            otel.add_event("e", {"where": ("p", "q")})
        made.append(otel)
    first, second = (span_from_otel(o, "ro", "at", i + 1) for i, o in enumerate(made))
    assert first.attributes == {"seq": [1, 2, 3], "name": "x"}
    assert first.events[0].attributes == {"where": ["p", "q"]}
    assert first.resource_attributes["tags"] == ["a", "b"] and first.resource_attributes["service.name"] == "svc"
    first.resource_attributes["tags"].append("c")  # one span's lists are not another's
    assert second.resource_attributes["tags"] == ["a", "b"]


def test_reward_spans_are_found_and_others_are_not() -> None:
    reward = span({"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5, "x": 1})
    found = reward_event(reward)
    assert found is not None and (found.value, found.primary_key) == (0.5, "primary")
    assert reward_event(span({"agentlightning.rewardish": 1, "x.agentlightning": 2})) is None
    assert get_rewards_from_span(span({})) == []
