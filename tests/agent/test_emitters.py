"""Emitters and readers: the spans an agent emits, and the values read back from them, as in Agent Lightning 0.3."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from voltbus.schemas.spans import SpanStatus
from voltbus.services.clients.store.types import Span
from voltbus.services.clients.telemetry.attributes import make_link_attributes, make_tag_attributes
from voltbus.services.clients.telemetry.emitters import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    encode_object,
    find_final_reward,
    find_reward_spans,
    get_message_value,
    get_object_value,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)
from voltbus.services.clients.telemetry.semconv import RewardDimension
from voltbus.services.clients.telemetry.tracing import SpanCore

from .conftest import RecordingTracer

# Annotations.


def test_annotation_span_is_flattened_sanitised_and_ok(tracer: RecordingTracer) -> None:
    span = emit_annotation({"meta": {"k": "v", "n": [1, True]}, "tags": ["a", "b"], "rows": [{"x": 1}]})
    assert tracer.spans == [span]
    assert span.name == "agentlightning.annotation"
    assert span.status == SpanStatus(status_code="OK")
    # [1, True] mixes int and bool, so flattening expands it by index (as Agent Lightning does).
    assert span.attributes == {"meta.k": "v", "meta.n.0": 1, "meta.n.1": True, "tags": ["a", "b"], "rows.0.x": 1}


@pytest.mark.parametrize(
    ("annotation", "message"),
    [
        ({"a": None}, "Attribute value must be a string"),
        ({"a": object()}, "Attribute value must be a string"),
        ({"a": {1: "x"}}, "Only string keys are supported"),
    ],
)
def test_annotation_rejects_values_that_are_not_attributes(
    tracer: RecordingTracer, annotation: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        emit_annotation(annotation)
    assert tracer.spans == []


def test_annotation_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match=r"^No active tracer found\. Cannot emit annotation span\.$"):
        emit_annotation({"a": 1})


def test_annotation_without_propagation_uses_a_dummy_tracer(tracer: RecordingTracer) -> None:
    span = emit_annotation({"a": 1}, propagate=False)
    assert span.attributes == {"a": 1} and span.name == "agentlightning.annotation"
    assert tracer.spans == []


def test_propagate_false_needs_no_active_tracer(no_tracer: None) -> None:
    assert emit_reward(1.0, propagate=False).attributes["agentlightning.reward.0.value"] == 1.0
    assert emit_message("m", propagate=False) is None
    assert emit_object([1], propagate=False).name == "agentlightning.object"
    assert emit_exception(ValueError("x"), propagate=False) is None


# Rewards.


def test_scalar_reward(tracer: RecordingTracer) -> None:
    span = emit_reward(0.5)
    assert span.name == "agentlightning.annotation"
    assert span.attributes == {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 0.5}
    assert get_reward_value(span) == 0.5


@pytest.mark.parametrize(("reward", "expected"), [(1, 1.0), (True, 1.0), (False, 0.0), (-2, -2.0)])
def test_int_and_bool_rewards_become_floats(tracer: RecordingTracer, reward: Any, expected: float) -> None:
    value = emit_reward(reward).attributes["agentlightning.reward.0.value"]
    assert value == expected and isinstance(value, float)


@pytest.mark.parametrize("reward", ["1.0", None, [1.0]])
def test_non_numeric_scalar_reward_raises_type_error(tracer: RecordingTracer, reward: Any) -> None:
    with pytest.raises(TypeError, match="Reward must be a number, got: "):
        emit_reward(reward)
    assert tracer.spans == []


def test_dict_reward_puts_the_primary_first(tracer: RecordingTracer) -> None:
    span = emit_reward({"efficiency": 0.8, "task": 1, "safety": True}, primary_key="task")
    assert span.attributes == {
        "agentlightning.reward.0.name": "task",
        "agentlightning.reward.0.value": 1.0,
        "agentlightning.reward.1.name": "efficiency",
        "agentlightning.reward.1.value": 0.8,
        "agentlightning.reward.2.name": "safety",
        "agentlightning.reward.2.value": 1.0,
    }
    assert get_rewards_from_span(span) == [
        RewardDimension(name="task", value=1.0),
        RewardDimension(name="efficiency", value=0.8),
        RewardDimension(name="safety", value=1.0),
    ]
    assert get_reward_value(span) == 1.0


def test_dict_reward_errors(tracer: RecordingTracer) -> None:
    with pytest.raises(ValueError, match="Reward value must be a number, got: <class 'str'> for key b"):
        emit_reward({"a": 1.0, "b": "x"}, primary_key="a")
    with pytest.raises(ValueError, match="primary_key must be provided"):
        emit_reward({"a": 1.0})
    with pytest.raises(ValueError, match=r"Primary key 'c' not found in reward dict keys: \['a', 'b'\]"):
        emit_reward({"a": 1.0, "b": 2.0}, primary_key="c")
    assert tracer.spans == []


def test_reward_carries_links_and_tags(tracer: RecordingTracer) -> None:
    extras = {**make_link_attributes({"gen_ai.response.id": "r-1"}), **make_tag_attributes(["fast"]), "note": "n"}
    span = emit_reward(0.7, attributes=extras)
    assert span.attributes["agentlightning.link.0.value_match"] == "r-1"
    assert span.attributes["agentlightning.tag.0"] == "fast"
    assert span.attributes["note"] == "n"


def test_reward_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match="Cannot emit annotation span"):
        emit_reward(1.0)


# Reading rewards back.


def store_span(name: str, attributes: dict[str, Any]) -> Span:
    """A store Span of one attempt with these attributes (also used by the span conversion tests)."""
    return Span(
        rollout_id="ro",
        attempt_id="at",
        sequence_id=1,
        trace_id="a" * 32,
        span_id="b" * 16,
        name=name,
        attributes=attributes,
    )


def test_rewards_read_from_store_spans_and_readable_spans(tracer: RecordingTracer) -> None:
    attributes = emit_reward({"a": 0.25, "b": 1.0}, primary_key="a").attributes
    stored = store_span("agentlightning.annotation", dict(attributes))
    readable = ReadableSpan(name="agentlightning.annotation", attributes=dict(attributes))
    for span in (stored, readable):
        assert get_reward_value(span) == 0.25
        assert [r.name for r in get_rewards_from_span(span)] == ["a", "b"]
        assert is_reward_span(span)


def test_v03_reward_is_read_whatever_the_span_name() -> None:
    span = SpanCore(
        name="anything", attributes={"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": 2}
    )
    assert get_reward_value(span) == 2.0


def test_v03_reward_value_is_coerced_to_float() -> None:
    span = SpanCore(name="x", attributes={"agentlightning.reward.0.name": "p", "agentlightning.reward.0.value": "0.5"})
    assert get_reward_value(span) == 0.5


def test_malformed_v03_reward_raises() -> None:
    with pytest.raises(msgspec.ValidationError):
        get_rewards_from_span(SpanCore(name="x", attributes={"agentlightning.reward.0.value": 1.0}))
    with pytest.raises(ValueError, match="exactly equal to prefix"):
        get_rewards_from_span(SpanCore(name="x", attributes={"agentlightning.reward": 1.0}))


def test_keys_that_only_share_the_prefix_text_are_not_rewards() -> None:
    assert get_rewards_from_span(SpanCore(name="x", attributes={"agentlightning.reward_kind": "x"})) == []


@pytest.mark.parametrize("key", ["agentops.task.output", "agentops.entity.output"])
def test_legacy_agentops_reward(key: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="voltbus.services.clients.telemetry.emitters")
    span = SpanCore(name="op", attributes={key: json.dumps({"type": "reward", "value": 0.9})})
    assert get_reward_value(span) == 0.9
    assert "AgentOps" in caplog.text


def test_legacy_agentops_reward_variants(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="voltbus.services.clients.telemetry.emitters")
    as_dict = ReadableSpan(name="op", attributes={"agentops.task.output": '{"type": "reward", "value": null}'})
    assert get_reward_value(as_dict) is None
    integer = SpanCore(name="op", attributes={"agentops.task.output": '{"type": "reward", "value": 1}'})
    assert get_reward_value(integer) == 1
    assert "Reward is not a number" in caplog.text
    other = SpanCore(name="op", attributes={"agentops.task.output": '{"type": "answer", "value": 1.0}'})
    assert get_reward_value(other) is None


@pytest.mark.parametrize("output", ["not json", "42", "[1, 2]", "", '"reward"'])
def test_ordinary_agentops_outputs_are_not_rewards(output: str) -> None:
    assert get_reward_value(SpanCore(name="op", attributes={"agentops.entity.output": output})) is None


def test_entity_output_is_read_when_task_output_is_not_a_reward() -> None:
    attributes = {"agentops.task.output": '{"type": "x"}', "agentops.entity.output": '{"type": "reward", "value": 0.3}'}
    assert get_reward_value(SpanCore(name="op", attributes=attributes)) == 0.3


@pytest.mark.parametrize("name", ["agentlightning.annotation", "agentlightning.reward"])
def test_legacy_v02_reward(name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="voltbus.services.clients.telemetry.emitters")
    assert get_reward_value(SpanCore(name=name, attributes={"reward": 0.4})) == 0.4
    assert "legacy version of reward span" in caplog.text


def test_legacy_v02_reward_needs_its_span_name() -> None:
    assert get_reward_value(SpanCore(name="other", attributes={"reward": 0.4})) is None
    assert get_reward_value(SpanCore(name="agentlightning.annotation", attributes={"other": 1})) is None
    assert get_reward_value(SpanCore(name="agentlightning.annotation")) is None


def test_find_reward_spans_and_final_reward(tracer: RecordingTracer) -> None:
    first = emit_reward(0.1)
    message = SpanCore(name="agentlightning.message", attributes={"agentlightning.message.body": "hi"})
    legacy = SpanCore(name="agentlightning.annotation", attributes={"reward": 0.2})
    empty = SpanCore(name="op", attributes={"agentops.task.output": '{"type": "reward", "value": null}'})
    spans = [first, message, legacy, empty]
    assert find_reward_spans(spans) == [first, legacy]
    assert find_final_reward(spans) == 0.2
    assert find_final_reward([first, message]) == 0.1
    assert find_final_reward([message]) is None
    assert find_final_reward([]) is None


def test_final_reward_scans_from_the_end_over_store_spans() -> None:
    spans = [store_span("agentlightning.annotation", {"reward": float(i)}) for i in range(3)]
    assert find_final_reward(spans) == 2.0


# Messages.


def test_message_span_returns_none(tracer: RecordingTracer) -> None:
    assert emit_message("hello", attributes={"level": "info", "ctx": {"step": 2}}) is None
    [span] = tracer.spans
    assert span.name == "agentlightning.message"
    assert span.attributes == {"agentlightning.message.body": "hello", "level": "info", "ctx.step": 2}
    assert get_message_value(span) == "hello"


def test_message_must_be_a_string(tracer: RecordingTracer) -> None:
    with pytest.raises(TypeError, match="Message must be a string, got: <class 'int'>"):
        emit_message(123)  # type: ignore[arg-type]
    assert tracer.spans == []


def test_message_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match="Cannot emit message span"):
        emit_message("x")


def test_get_message_value() -> None:
    assert get_message_value(SpanCore(name="x")) is None
    assert get_message_value(ReadableSpan(name="x", attributes={"agentlightning.message.body": "b"})) == "b"
    with pytest.raises(TypeError, match="Message must be a string, got: <class 'int'>"):
        get_message_value(SpanCore(name="x", attributes={"agentlightning.message.body": 1}))


# Objects.


@pytest.mark.parametrize(
    ("value", "kind"),
    [("text", "str"), (7, "int"), (2.5, "float"), (True, "bool"), (False, "bool"), (b"\x00\xff", "bytes")],
)
def test_literal_objects_round_trip(tracer: RecordingTracer, value: Any, kind: str) -> None:
    span = emit_object(value)
    assert span.name == "agentlightning.object" and span.status.status_code == "OK"
    assert span.attributes["agentlightning.object.type"] == kind
    assert "agentlightning.object.json" not in span.attributes
    assert get_object_value(span) == value and type(get_object_value(span)) is type(value)


def test_literal_encodings() -> None:
    assert encode_object(True)["agentlightning.object.literal"] == "True"
    assert encode_object(b"hi")["agentlightning.object.literal"] == "aGk="


class Payload(dict[str, int]):
    pass


@pytest.mark.parametrize(
    ("value", "kind"),
    [({"a": [1, 2]}, "dict"), ([1, "x"], "list"), (None, "NoneType"), (Payload(a=1), f"{__name__}.Payload")],
)
def test_json_objects_round_trip(tracer: RecordingTracer, value: Any, kind: str) -> None:
    span = emit_object(value, attributes={"source": "test"})
    assert span.attributes["agentlightning.object.type"] == kind
    assert span.attributes["agentlightning.object.json"] == json.dumps(value)
    assert span.attributes["source"] == "test"
    assert get_object_value(span) == value


def test_object_must_be_json_serialisable(tracer: RecordingTracer) -> None:
    with pytest.raises(RuntimeError, match="Object must be JSON serializable, got: <class 'object'>"):
        emit_object(object())
    assert tracer.spans == []


def test_object_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match="Cannot emit object span"):
        emit_object(1)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"agentlightning.object.json": "{bad"}, "Failed to deserialize object JSON from span."),
        ({"agentlightning.object.json": 1}, "Object JSON span attribute must be a string."),
        ({"agentlightning.object.literal": 1}, "Object literal span attribute must be a string."),
        (
            {"agentlightning.object.literal": "x", "agentlightning.object.type": "set"},
            "Unsupported object type for literal deserialization: set",
        ),
    ],
)
def test_get_object_value_errors(attributes: dict[str, Any], message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        get_object_value(SpanCore(name="x", attributes=attributes))


def test_get_object_value_defaults() -> None:
    assert get_object_value(SpanCore(name="x")) is None
    assert get_object_value(SpanCore(name="x", attributes={"agentlightning.object.literal": "s"})) == "s"
    bool_span = {"agentlightning.object.literal": "TRUE", "agentlightning.object.type": "bool"}
    assert get_object_value(SpanCore(name="x", attributes=bool_span)) is True
    with pytest.raises(ValueError):
        get_object_value(
            SpanCore(name="x", attributes={"agentlightning.object.literal": "x", "agentlightning.object.type": "int"})
        )


# Exceptions.


def test_exception_span_is_ok_and_carries_the_exception(tracer: RecordingTracer) -> None:
    try:
        raise ValueError("boom")
    except ValueError as err:
        assert emit_exception(err, attributes={"step": 3}) is None
    [span] = tracer.spans
    assert span.name == "agentlightning.exception"
    assert span.status == SpanStatus(status_code="OK")
    assert span.attributes["exception.type"] == "ValueError"
    assert span.attributes["exception.message"] == "boom"
    assert span.attributes["exception.escaped"] is True
    assert "ValueError: boom" in str(span.attributes["exception.stacktrace"])
    assert span.attributes["step"] == 3


def test_exception_must_be_an_exception(tracer: RecordingTracer) -> None:
    with pytest.raises(TypeError, match="Expected a BaseException instance, got: <class 'str'>."):
        emit_exception("boom")  # type: ignore[arg-type]
    assert tracer.spans == []


def test_exception_without_tracer_raises(no_tracer: None) -> None:
    with pytest.raises(RuntimeError, match="Cannot emit exception span"):
        emit_exception(KeyboardInterrupt())
