"""Emitters an agent calls to record annotations, rewards, messages, objects and exceptions as spans.

Same API and attributes as Agent Lightning 0.3's ``agentlightning/emitter``, plus the readers that get values back.
``operation`` lives in :mod:`voltbus.services.clients.telemetry.operations`.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import msgspec

from voltbus.schemas.base import Attributes
from voltbus.schemas.spans import SpanStatus
from voltbus.services.clients.telemetry.attributes import (
    SpanLike,
    SpanT,
    check_attributes_sanity,
    filter_and_unflatten_attributes,
    filter_attributes,
    flatten_attributes,
    format_exception_attributes,
    full_qualified_name,
    sanitize_attributes,
)
from voltbus.services.clients.telemetry.semconv import (
    AGL_ANNOTATION,
    AGL_EXCEPTION,
    AGL_MESSAGE,
    AGL_OBJECT,
    AGL_REWARD,
    LightningSpanAttributes,
    RewardDimension,
)
from voltbus.services.clients.telemetry.tracing import DummyTracer, SpanCore, Tracer, get_active_tracer

logger = logging.getLogger(__name__)

_OK = SpanStatus(status_code="OK")
_REWARD = LightningSpanAttributes.REWARD.value
_BODY = LightningSpanAttributes.MESSAGE_BODY.value
_TYPE = LightningSpanAttributes.OBJECT_TYPE.value
_LITERAL = LightningSpanAttributes.OBJECT_LITERAL.value
_JSON = LightningSpanAttributes.OBJECT_JSON.value


def resolve_tracer(propagate: bool, action: str) -> Tracer:
    """The active tracer (RuntimeError naming ``action`` when none) or, without ``propagate``, a DummyTracer."""
    if not propagate:
        return DummyTracer()
    tracer = get_active_tracer()
    if tracer is None:
        raise RuntimeError(f"No active tracer found. Cannot {action}.")
    return tracer


def _extras(attributes: Mapping[str, Any] | None) -> Attributes:
    return sanitize_attributes(flatten_attributes(dict(attributes))) if attributes else {}


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> SpanCore:
    """Emit an ``agentlightning.annotation`` span with the flattened annotation; None or objects raise ValueError."""
    attributes = flatten_attributes(dict(annotation), expand_leaf_lists=False)
    check_attributes_sanity(attributes)
    sanitized = sanitize_attributes(attributes)
    tracer = resolve_tracer(propagate, "emit annotation span")
    return tracer.create_span(name=AGL_ANNOTATION, attributes=sanitized, status=_OK)


def _reward_dimensions(reward: object, primary_key: str | None) -> list[dict[str, Any]]:
    if not isinstance(reward, Mapping):
        if isinstance(reward, (int, bool)):
            reward = float(reward)
        elif not isinstance(reward, float):
            raise TypeError(f"Reward must be a number, got: {type(reward)}")
        return [{"name": "primary", "value": reward}]
    values: dict[str, float] = {}
    for key, value in cast(Mapping[str, object], reward).items():
        if not isinstance(value, (int, bool, float)):
            raise ValueError(f"Reward value must be a number, got: {type(value)} for key {key}")
        values[key] = float(value)
    if primary_key is None:
        raise ValueError("When emitting a multi-dimensional reward as a dict, primary_key must be provided.")
    if primary_key not in values:
        raise ValueError(f"Primary key '{primary_key}' not found in reward dict keys: {list(values.keys())}")
    order = [primary_key, *(k for k in values if k != primary_key)]
    return [{"name": k, "value": values[k]} for k in order]


def emit_reward(
    reward: float | Mapping[str, float],
    *,
    primary_key: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    propagate: bool = True,
) -> SpanCore:
    """Emit a reward (a number, or a dict of named numbers with ``primary_key`` first) as an annotation span."""
    dimensions = _reward_dimensions(reward, primary_key)
    return emit_annotation({_REWARD: dimensions, **(attributes or {})}, propagate=propagate)


def emit_message(message: str, attributes: Mapping[str, Any] | None = None, propagate: bool = True) -> None:
    """Emit an ``agentlightning.message`` span carrying ``message``; returns None, as Agent Lightning does."""
    if not isinstance(message, str):
        raise TypeError(f"Message must be a string, got: {type(message)}.")
    tracer = resolve_tracer(propagate, "emit message span")
    tracer.create_span(AGL_MESSAGE, attributes={_BODY: message, **_extras(attributes)})


def encode_object(value: Any) -> Attributes:
    """The object-span attributes of ``value``: a literal for primitives and bytes, JSON otherwise.

    >>> encode_object(3), encode_object(b"hi")[_LITERAL], encode_object({"a": [1]})
    ({'agentlightning.object.type': 'int', 'agentlightning.object.literal': '3'}, 'aGk=', \
{'agentlightning.object.type': 'dict', 'agentlightning.object.json': '{"a": [1]}'})
    """
    if isinstance(value, (str, int, float, bool)):
        return {_TYPE: type(value).__name__, _LITERAL: str(value)}
    if isinstance(value, bytes):
        return {_TYPE: "bytes", _LITERAL: base64.b64encode(value).decode("utf-8")}
    try:
        serialized = json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise RuntimeError(f"Object must be JSON serializable, got: {type(value)}.") from exc
    return {_TYPE: full_qualified_name(type(value)), _JSON: serialized}


def emit_object(value: Any, attributes: Mapping[str, Any] | None = None, propagate: bool = True) -> SpanCore:
    """Emit an ``agentlightning.object`` span carrying ``value``; non-JSON values raise RuntimeError."""
    span_attributes = {**encode_object(value), **_extras(attributes)}
    tracer = resolve_tracer(propagate, "emit object span")
    return tracer.create_span(name=AGL_OBJECT, attributes=span_attributes, status=_OK)


def emit_exception(
    exception: BaseException, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> None:
    """Emit an ``agentlightning.exception`` span (status OK: the span itself succeeded)."""
    if not isinstance(exception, BaseException):
        raise TypeError(f"Expected a BaseException instance, got: {type(exception)}.")
    span_attributes = {**format_exception_attributes(exception), **_extras(attributes)}
    tracer = resolve_tracer(propagate, "emit exception span")
    tracer.create_span(AGL_EXCEPTION, attributes=span_attributes, status=_OK)


def get_rewards_from_span(span: SpanLike) -> list[RewardDimension]:
    """The reward dimensions of a span, primary first; ``[]`` when it carries none."""
    attributes = span.attributes or {}
    if _REWARD not in "\n".join(attributes) or not filter_attributes(attributes, _REWARD):  # (the first: in C)
        return []
    return msgspec.convert(filter_and_unflatten_attributes(attributes, _REWARD), list[RewardDimension], strict=False)


def _legacy_agentops_reward(attributes: Mapping[str, Any]) -> tuple[bool, Any]:
    for key in ("agentops.task.output", "agentops.entity.output"):
        output = attributes.get(key)
        if isinstance(output, str) and output:
            try:
                output = json.loads(output)
            except json.JSONDecodeError:
                output = None
        # Only a dict is AgentOps' reward payload; other outputs are ordinary task results.
        if isinstance(output, dict) and output and cast(dict[str, Any], output).get("type") == "reward":
            return True, cast(dict[str, Any], output).get("value")
    return False, None


def _checked(value: Any, source: str) -> float | None:
    if value is not None and not isinstance(value, float):
        logger.error(f"Reward is not a number, got: {type(value)}. This may cause undefined behaviors.")
    if value is not None:
        logger.warning(f"Extracted reward {value} from {source}. Please migrate to `emit_reward`.")
    return cast(float | None, value)


def get_reward_value(span: SpanLike) -> float | None:
    """The primary reward of a span (v0.3, legacy AgentOps or legacy v0.2 format), or None."""
    rewards = get_rewards_from_span(span)
    if rewards:
        return rewards[0].value
    attributes = span.attributes or {}
    found, value = _legacy_agentops_reward(attributes)
    if found:
        return _checked(value, "AgentOps (a deprecated format)")
    if span.name in (AGL_ANNOTATION, AGL_REWARD) and attributes:
        return _checked(attributes.get("reward"), "a legacy version of reward span")
    return None


def is_reward_span(span: SpanLike) -> bool:
    """Whether the span carries a reward value."""
    return get_reward_value(span) is not None


def find_reward_spans(spans: Sequence[SpanT]) -> list[SpanT]:
    """The reward spans, in order."""
    return [span for span in spans if is_reward_span(span)]


def find_final_reward(spans: Sequence[SpanLike]) -> float | None:
    """The last reward value in ``spans`` (scanning from the end), or None."""
    for span in reversed(spans):
        value = get_reward_value(span)
        if value is not None:
            return value
    return None


def get_message_value(span: SpanLike) -> str | None:
    """The body of a message span; None when absent, TypeError when not a str."""
    attributes = span.attributes or {}
    if _BODY not in attributes:
        return None
    message = attributes[_BODY]
    if isinstance(message, str):
        return message
    raise TypeError(f"Message must be a string, got: {type(message)}.")


def _decode_literal(literal: str, kind: object) -> Any:
    decoders: dict[object, Callable[[str], Any]] = {
        "str": str,
        "int": int,
        "float": float,
        "bool": lambda s: s.lower() == "true",
        "bytes": lambda s: base64.b64decode(s.encode("utf-8")),
    }
    if kind not in decoders:
        raise RuntimeError(f"Unsupported object type for literal deserialization: {kind}")
    return decoders[kind](literal)


def get_object_value(span: SpanLike) -> Any:
    """The payload of an object span, or None when it has none; malformed payloads raise RuntimeError."""
    attributes = span.attributes or {}
    if _JSON in attributes:
        serialized = attributes[_JSON]
        if not isinstance(serialized, str):
            raise RuntimeError("Object JSON span attribute must be a string.")
        try:
            return json.loads(serialized)
        except (TypeError, ValueError) as exc:
            raise RuntimeError("Failed to deserialize object JSON from span.") from exc
    if _LITERAL in attributes:
        literal = attributes[_LITERAL]
        if not isinstance(literal, str):
            raise RuntimeError("Object literal span attribute must be a string.")
        return _decode_literal(literal, attributes.get(_TYPE, "str"))
    return None
