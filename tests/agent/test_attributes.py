"""Attribute helpers and semantic conventions: the same keys and flattening rules as Agent Lightning 0.3."""

from __future__ import annotations

import doctest
import importlib
import json
import logging
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags

from voltbus.services.clients.store.types import Span
from voltbus.services.clients.telemetry import semconv
from voltbus.services.clients.telemetry.attributes import (
    check_attributes_sanity,
    extract_links_from_attributes,
    extract_tags_from_attributes,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    format_exception_attributes,
    full_qualified_name,
    make_link_attributes,
    make_tag_attributes,
    query_linked_spans,
    sanitize_attribute_value,
    sanitize_attributes,
    unflatten_attributes,
)
from voltbus.services.clients.telemetry.semconv import (
    LinkMatch,
    LinkPydanticModel,
    RewardDimension,
    RewardPydanticModel,
)
from voltbus.services.clients.telemetry.tracing import SpanCore


@pytest.mark.parametrize(
    "name",
    [
        "voltbus.services.clients.telemetry.semconv",
        "voltbus.services.clients.telemetry.attributes",
        "voltbus.services.clients.telemetry.emitters",
        "voltbus.services.clients.telemetry.operations",
    ],
)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= (0 if name.endswith("semconv") else 1)


# Semantic conventions carry Agent Lightning's exact strings.


def test_span_names() -> None:
    assert semconv.AGL_ANNOTATION == "agentlightning.annotation"
    assert semconv.AGL_MESSAGE == "agentlightning.message"
    assert semconv.AGL_OBJECT == "agentlightning.object"
    assert semconv.AGL_EXCEPTION == "agentlightning.exception"
    assert semconv.AGL_OPERATION == "agentlightning.operation"
    assert semconv.AGL_REWARD == "agentlightning.reward"
    assert semconv.AGL_VIRTUAL == "agentlightning.virtual"


def test_attribute_keys() -> None:
    assert {a.name: a.value for a in semconv.LightningResourceAttributes} == {
        "ROLLOUT_ID": "agentlightning.rollout_id",
        "ATTEMPT_ID": "agentlightning.attempt_id",
        "SPAN_SEQUENCE_ID": "agentlightning.span_sequence_id",
        "TRACER_NAME": "agentlightning.tracer.name",
    }
    assert {a.name: a.value for a in semconv.LightningSpanAttributes} == {
        "REWARD": "agentlightning.reward",
        "LINK": "agentlightning.link",
        "TAG": "agentlightning.tag",
        "MESSAGE_BODY": "agentlightning.message.body",
        "OBJECT_TYPE": "agentlightning.object.type",
        "OBJECT_LITERAL": "agentlightning.object.literal",
        "OBJECT_JSON": "agentlightning.object.json",
        "OPERATION_NAME": "agentlightning.operation.name",
        "OPERATION_INPUT": "agentlightning.operation.input",
        "OPERATION_OUTPUT": "agentlightning.operation.output",
    }
    assert [a.value for a in semconv.RewardAttributes] == ["name", "value"]
    assert [a.value for a in semconv.LinkAttributes] == ["key_match", "value_match"]


def test_models_have_al_names_and_dump() -> None:
    assert RewardPydanticModel is RewardDimension and LinkPydanticModel is LinkMatch
    assert RewardDimension(name="primary", value=1.0).model_dump() == {"name": "primary", "value": 1.0}
    assert LinkMatch(key_match="k", value_match="v").model_dump() == {"key_match": "k", "value_match": "v"}


# Flattening.


def test_flatten_keeps_homogeneous_leaf_lists() -> None:
    assert flatten_attributes({"a": {"b": 1, "c": [2, 3]}}) == {"a.b": 1, "a.c": [2, 3]}


def test_flatten_expands_leaf_lists_on_request() -> None:
    assert flatten_attributes({"a": {"b": 1, "c": [2, 3]}}, expand_leaf_lists=True) == {
        "a.b": 1,
        "a.c.0": 2,
        "a.c.1": 3,
    }


def test_flatten_expands_lists_of_dicts_and_drops_empty_containers() -> None:
    data = {"users": [{"name": "Alice", "tags": ["admin", "staff"]}, {"name": "Bob", "tags": []}], "e": {}}
    assert flatten_attributes(data) == {
        "users.0.name": "Alice",
        "users.0.tags": ["admin", "staff"],
        "users.1.name": "Bob",
    }


@pytest.mark.parametrize("values", [[1, "two"], [1, 2.0, 3], [True, 1]])
def test_flatten_expands_mixed_lists_with_a_warning(values: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="voltbus.services.clients.telemetry.attributes")
    assert flatten_attributes({"v": values}) == {f"v.{i}": v for i, v in enumerate(values)}
    assert "mixed primitive types" in caplog.text


def test_flatten_root_values() -> None:
    assert flatten_attributes([10, 20]) == {"0": 10, "1": 20}
    assert flatten_attributes([]) == {}
    assert flatten_attributes(42) == {"": 42}
    assert flatten_attributes({"a": None, "t": (1, 2)}) == {"a": None, "t": (1, 2)}


def test_flatten_rejects_non_str_keys() -> None:
    with pytest.raises(ValueError, match="Only string keys are supported in dictionaries") as info:
        flatten_attributes({"a": {1: "bad"}})
    assert "'1'" in str(info.value) and "<class 'int'>" in str(info.value) and "in a" in str(info.value)


# Unflattening.


@pytest.mark.parametrize(
    ("flat", "nested"),
    [
        ({}, {}),
        ({"a.b": 1, "a.c": 2}, {"a": {"b": 1, "c": 2}}),
        ({"a.0": "x", "a.1": "y", "a.2": "z"}, {"a": ["x", "y", "z"]}),
        ({"a.0": "first", "a.2": "third"}, {"a": {"0": "first", "2": "third"}}),
        ({"a.0": "zero", "a.foo": "bar"}, {"a": {"0": "zero", "foo": "bar"}}),
        ({"1": "b", "0": "a"}, ["a", "b"]),
        ({"a.0.0": 1, "a.0.1": 2, "a.1.0": 3}, {"a": [[1, 2], [3]]}),
        ({"a": 1, "a.b": 2}, {"a": {"b": 2}}),
        ({"a.b": 2, "a": 1}, {"a": 1}),
    ],
)
def test_unflatten(flat: dict[str, Any], nested: Any) -> None:
    assert unflatten_attributes(flat) == nested


@pytest.mark.parametrize(
    "value",
    [
        {"a": {"b": 1, "c": [2, 3]}},
        {"x": [1, 2, {"y": 3}]},
        [{"name": "Alice"}, {"name": "Bob", "scores": [10, 20]}],
    ],
)
def test_flatten_unflatten_round_trip(value: Any) -> None:
    assert unflatten_attributes(flatten_attributes(value)) == value


# Filtering.


def test_filter_keeps_the_prefix_and_its_children_only() -> None:
    attributes = {
        "agentlightning.link": "root",
        "agentlightning.link.0.key_match": "trace_id",
        "agentlightning.other": "x",
        "agentlightning.link_extra": "y",
    }
    assert filter_attributes(attributes, "agentlightning.link") == {
        "agentlightning.link": "root",
        "agentlightning.link.0.key_match": "trace_id",
    }


def test_filter_and_unflatten_strips_the_prefix() -> None:
    attributes = {"p.0.k": "a", "p.0.v": "b", "p.1.k": "c", "p.1.v": "d", "q": 1}
    assert filter_and_unflatten_attributes(attributes, "p") == [{"k": "a", "v": "b"}, {"k": "c", "v": "d"}]
    assert filter_and_unflatten_attributes(attributes, "none") == {}


def test_filter_and_unflatten_rejects_a_key_equal_to_the_prefix() -> None:
    with pytest.raises(ValueError, match="Cannot unflatten attribute with key exactly equal to prefix: p"):
        filter_and_unflatten_attributes({"p": "x"}, "p")


# Sanitising and checking.


def test_sanitize_keeps_primitives_and_normalises_lists() -> None:
    assert sanitize_attribute_value("text") == "text"
    assert sanitize_attribute_value(42) == 42
    assert sanitize_attribute_value(True) is True
    assert sanitize_attribute_value(["a", "b"]) == ["a", "b"]
    assert sanitize_attribute_value([True, False]) == [True, False]
    assert sanitize_attribute_value([True, 2]) == [1, 2]
    assert sanitize_attribute_value([1.0, 2, True]) == [1.0, 2.0, 1.0]
    assert sanitize_attribute_value([]) == []


def test_sanitize_falls_back_to_json(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="voltbus.services.clients.telemetry.attributes")
    assert sanitize_attribute_value([1, "two"]) == json.dumps([1, "two"])
    assert "Failed to sanitize list attribute" in caplog.text
    assert sanitize_attribute_value(None) == "null"
    assert sanitize_attribute_value({"a": 1}) == '{"a": 1}'
    assert sanitize_attribute_value((1, 2)) == "[1, 2]"


def test_sanitize_forces_unserialisable_objects_through_str() -> None:
    class Custom:
        def __str__(self) -> str:
            return "forced"

    assert json.loads(str(sanitize_attribute_value(Custom()))) == "forced"
    with pytest.raises(ValueError, match="Object must be JSON serializable"):
        sanitize_attribute_value(Custom(), force=False)


def test_sanitize_attributes_names_the_failing_key() -> None:
    assert sanitize_attributes({"a": [1, True], "b": "x"}) == {"a": [1, 1], "b": "x"}
    with pytest.raises(ValueError, match="Failed to sanitize attribute 'bad'"):
        sanitize_attributes({"ok": 1, "bad": object()}, force=False)


def test_check_accepts_valid_attributes() -> None:
    check_attributes_sanity({"s": "a", "i": 3, "f": 0.5, "b": False, "flags": [True], "scores": [1, True], "e": []})


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({1: "v"}, "Attribute key must be a string"),
        ({"mixed": [1, "two"]}, "Failed to sanitize list attribute 'mixed'"),
        ({"bad": {"nested": "v"}}, "Attribute value must be a string, int, float, bool, or list of these"),
        ({"none": None}, "got <class 'NoneType'> for value 'None'"),
    ],
)
def test_check_rejects(attributes: dict[Any, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_attributes_sanity(attributes)


# Tags and links.


def test_tags_round_trip() -> None:
    flat = make_tag_attributes(["fast", "reliable"])
    assert flat == {"agentlightning.tag.0": "fast", "agentlightning.tag.1": "reliable"}
    assert extract_tags_from_attributes({**flat, "other": 1}) == ["fast", "reliable"]


def test_extract_tags_without_tags_is_empty() -> None:
    assert extract_tags_from_attributes({"agentlightning.reward.0.value": 1.0}) == []


def test_extract_tags_rejects_non_strings_and_gaps() -> None:
    with pytest.raises(msgspec.ValidationError):
        extract_tags_from_attributes({"agentlightning.tag.0": 1})
    with pytest.raises(ValueError):  # indices 0 and 2 rebuild a dict, not a list
        extract_tags_from_attributes({"agentlightning.tag.0": "a", "agentlightning.tag.2": "b"})


def test_links_round_trip() -> None:
    flat = make_link_attributes({"gen_ai.response.id": "response-123", "span_id": "abcd1234abcd1234"})
    assert flat == {
        "agentlightning.link.0.key_match": "gen_ai.response.id",
        "agentlightning.link.0.value_match": "response-123",
        "agentlightning.link.1.key_match": "span_id",
        "agentlightning.link.1.value_match": "abcd1234abcd1234",
    }
    assert [link.model_dump() for link in extract_links_from_attributes(flat)] == [
        {"key_match": "gen_ai.response.id", "value_match": "response-123"},
        {"key_match": "span_id", "value_match": "abcd1234abcd1234"},
    ]
    assert extract_links_from_attributes({}) == []


def test_make_link_rejects_non_str_values() -> None:
    with pytest.raises(ValueError, match="Link value must be a string, got <class 'int'> for key 'span_id'"):
        make_link_attributes({"span_id": 123})


def _store_span(span_id: str, trace_id: str = "c" * 32, **attributes: Any) -> Span:
    return Span(
        rollout_id="ro",
        attempt_id="at",
        sequence_id=1,
        trace_id=trace_id,
        span_id=span_id,
        name="s",
        attributes=attributes,
    )


def _readable(trace_id: str | None, span_id: str, **attributes: Any) -> ReadableSpan:
    context = None
    if trace_id is not None:
        context = SpanContext(int(trace_id, 16), int(span_id, 16), False, TraceFlags(TraceFlags.SAMPLED))
    return ReadableSpan(name="r", context=context, attributes=attributes)


def test_query_matches_attributes_exactly_and_requires_every_link() -> None:
    a = _store_span("a" * 16, **{"gen_ai.response.id": "response-123", "custom": "needle"})
    b = _store_span("b" * 16, **{"gen_ai.response.id": "response-123", "custom": "other"})
    links = [LinkMatch(key_match="gen_ai.response.id", value_match="response-123")]
    assert query_linked_spans([a, b], links) == [a, b]
    links.append(LinkMatch(key_match="custom", value_match="needle"))
    assert query_linked_spans([a, b], links) == [a]
    assert query_linked_spans([a, b], []) == [a, b]


def test_query_matches_span_and_trace_ids_of_store_spans() -> None:
    a, b = _store_span("a" * 16), _store_span("b" * 16, trace_id="d" * 32)
    assert query_linked_spans([a, b], [LinkMatch(key_match="span_id", value_match="b" * 16)]) == [b]
    assert query_linked_spans([a, b], [LinkMatch(key_match="trace_id", value_match="c" * 32)]) == [a]


def test_query_matches_ids_of_readable_spans() -> None:
    span = _readable("a" * 32, "0" * 15 + "b", marker="x")
    assert query_linked_spans([span], [LinkMatch(key_match="trace_id", value_match="a" * 32)]) == [span]
    assert query_linked_spans([span], [LinkMatch(key_match="span_id", value_match="0" * 15 + "b")]) == [span]
    assert query_linked_spans([span], [LinkMatch(key_match="span_id", value_match="b")]) == []


def test_query_readable_span_without_context_matches_on_attributes_only() -> None:
    orphan = _readable(None, "0", marker="x")
    assert query_linked_spans([orphan], [LinkMatch(key_match="marker", value_match="x")]) == [orphan]
    assert query_linked_spans([orphan], [LinkMatch(key_match="trace_id", value_match="a" * 32)]) == []


def test_query_spans_without_ids_never_match_id_links() -> None:
    core = SpanCore(name="c", attributes={"k": "v"})
    assert query_linked_spans([core], [LinkMatch(key_match="span_id", value_match="v")]) == []
    assert query_linked_spans([core], [LinkMatch(key_match="k", value_match="v")]) == [core]


# Exceptions and names.


def test_format_exception_attributes() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError as err:
        attributes = format_exception_attributes(err)
    assert attributes["exception.type"] == "RuntimeError"
    assert attributes["exception.message"] == "boom"
    assert attributes["exception.escaped"] is True
    assert "RuntimeError: boom" in str(attributes["exception.stacktrace"])


def test_format_exception_never_raised_still_has_a_trace_line() -> None:
    attributes = format_exception_attributes(KeyError("k"))
    assert attributes["exception.type"] == "KeyError" and attributes["exception.message"] == "'k'"


def test_full_qualified_name() -> None:
    class Local:
        pass

    assert full_qualified_name(int) == "int"
    assert full_qualified_name(Local) == f"{__name__}.test_full_qualified_name.<locals>.Local"
