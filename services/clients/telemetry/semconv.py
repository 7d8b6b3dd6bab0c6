"""Agent Lightning's semantic conventions: span names and attribute keys, with the same string values.

Spans an agent emits through voltbus read the same as Agent Lightning 0.3's (``agentlightning/semconv.py``).
"""

from __future__ import annotations

from enum import Enum

import msgspec

AGL_ANNOTATION = "agentlightning.annotation"
"""Span name for annotations: rewards, tags and metadata."""

AGL_MESSAGE = "agentlightning.message"
"""Span name for messages and logs."""

AGL_OBJECT = "agentlightning.object"
"""Span name for custom objects."""

AGL_EXCEPTION = "agentlightning.exception"
"""Span name for exceptions."""

AGL_OPERATION = "agentlightning.operation"
"""Span name for operations (functions or code blocks)."""

AGL_REWARD = "agentlightning.reward"
"""Legacy span name for rewards; reward spans are annotation spans now."""

AGL_VIRTUAL = "agentlightning.virtual"
"""Default name for synthetic spans (an adapter's root or intermediate steps)."""

EXCEPTION_TYPE = "exception.type"
"""OpenTelemetry's standard attribute for the exception class name."""

EXCEPTION_MESSAGE = "exception.message"
"""OpenTelemetry's standard attribute for the exception message."""

EXCEPTION_ESCAPED = "exception.escaped"
"""OpenTelemetry's standard attribute: the exception left the span's scope."""

EXCEPTION_STACKTRACE = "exception.stacktrace"
"""OpenTelemetry's standard attribute for the formatted traceback."""


class LightningResourceAttributes(Enum):
    """Resource attribute keys of Agent Lightning spans."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    """The span's rollout."""
    ATTEMPT_ID = "agentlightning.attempt_id"
    """The span's attempt."""
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    """The span's sequence id within its rollout."""
    TRACER_NAME = "agentlightning.tracer.name"
    """Which tracer created the span."""


class LightningSpanAttributes(Enum):
    """Span attribute keys (some are prefixes of flattened keys)."""

    REWARD = "agentlightning.reward"
    """Prefix of reward dimensions: ``agentlightning.reward.<i>.name`` / ``.value``."""
    LINK = "agentlightning.link"
    """Prefix of links: ``agentlightning.link.<i>.key_match`` / ``.value_match``."""
    TAG = "agentlightning.tag"
    """Prefix of tags: ``agentlightning.tag.<i>``."""
    MESSAGE_BODY = "agentlightning.message.body"
    """Text of a message span."""
    OBJECT_TYPE = "agentlightning.object.type"
    """Fully qualified type name of an object span's payload."""
    OBJECT_LITERAL = "agentlightning.object.literal"
    """Literal payload of an object span (str, int, float, bool, base64 bytes)."""
    OBJECT_JSON = "agentlightning.object.json"
    """JSON payload of an object span."""
    OPERATION_NAME = "agentlightning.operation.name"
    """Name of an operation, normally the function name."""
    OPERATION_INPUT = "agentlightning.operation.input"
    """Prefix of an operation's inputs."""
    OPERATION_OUTPUT = "agentlightning.operation.output"
    """An operation's output (a prefix when the output is nested)."""


class RewardAttributes(Enum):
    """Keys inside one flattened reward dimension; dimension 0 is the primary reward."""

    REWARD_NAME = "name"
    """Name of the dimension."""
    REWARD_VALUE = "value"
    """Value of the dimension."""


class LinkAttributes(Enum):
    """Keys inside one flattened link; ``trace_id`` and ``span_id`` match span ids directly."""

    KEY_MATCH = "key_match"
    """Attribute key to match on target spans (or ``trace_id`` / ``span_id``)."""
    VALUE_MATCH = "value_match"
    """Value that key must have."""


class RewardDimension(msgspec.Struct, frozen=True):
    """One named reward value (Agent Lightning's ``RewardPydanticModel``)."""

    name: str
    """Dimension name; ``primary`` for a scalar reward."""
    value: float
    """Reward value."""

    def model_dump(self) -> dict[str, object]:
        """The fields as a dict (pydantic-compatible spelling)."""
        return msgspec.structs.asdict(self)


class LinkMatch(msgspec.Struct, frozen=True):
    """A link to spans whose attribute ``key_match`` equals ``value_match`` (``LinkPydanticModel``)."""

    key_match: str
    """Attribute key on the target spans, or ``trace_id`` / ``span_id``."""
    value_match: str
    """Value the key must have."""

    def model_dump(self) -> dict[str, object]:
        """The fields as a dict (pydantic-compatible spelling)."""
        return msgspec.structs.asdict(self)


RewardPydanticModel = RewardDimension
"""Agent Lightning's name for :class:`RewardDimension`."""

LinkPydanticModel = LinkMatch
"""Agent Lightning's name for :class:`LinkMatch`."""
