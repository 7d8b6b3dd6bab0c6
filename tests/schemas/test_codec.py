"""Round trips, decode failures, forward compatibility and Struct rules for every event type."""

from __future__ import annotations

import ast
import pathlib

import msgspec
import pytest

import voltbus.schemas as schemas
from voltbus.schemas import (
    EVENT_TYPES,
    AttemptStarted,
    DecodeError,
    SpanRecorded,
    decode_any,
    decode_control,
    decode_spans,
    encode,
    stream_of,
)

from .samples import SAMPLES

SCHEMAS_DIR = pathlib.Path(schemas.__file__).parent
TAGS = sorted(cls.__name__ for cls in EVENT_TYPES)


def struct_classes() -> list[type[msgspec.Struct]]:
    """Every Struct class defined in a ``voltbus.schemas`` module."""
    found = {v for v in vars(schemas).values() if isinstance(v, type) and issubclass(v, msgspec.Struct)}
    return sorted(found, key=lambda c: c.__name__)


def test_samples_cover_every_event_type() -> None:
    assert sorted(SAMPLES) == TAGS


@pytest.mark.parametrize("tag", TAGS)
def test_round_trip(tag: str) -> None:
    event = SAMPLES[tag]
    data = encode(event)
    assert msgspec.json.decode(data)["type"] == tag
    assert decode_any(data) == event
    decode = decode_spans if stream_of(event) == "spans" else decode_control
    assert decode(data) == event


@pytest.mark.parametrize("tag", TAGS)
def test_other_stream_rejects(tag: str) -> None:
    event = SAMPLES[tag]
    wrong = decode_control if stream_of(event) == "spans" else decode_spans
    with pytest.raises(DecodeError, match="type"):
        wrong(encode(event))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00not json", "malformed"),
        (b'{"type":"RolloutExploded","event_id":"e"}', "Invalid value 'RolloutExploded'"),
        (b'{"event_id":"e","rollout_id":"r"}', "missing required field `type`"),
        (b'{"type":"AttemptStarted","event_id":"e","rollout_id":"r","attempt_id":"a","at":"noon"}', "$.at"),
        (b'{"type":"AttemptStarted","event_id":"","rollout_id":"r","attempt_id":"a","at":1}', "$.event_id"),
    ],
)
def test_bad_bytes_raise_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_any(data)
    assert reason in info.value.reason
    assert isinstance(info.value.__cause__, msgspec.DecodeError)


def test_constraints_are_checked_on_decode() -> None:
    data = encode(SAMPLES["AttemptClaimed"]).replace(b'"sequence_id":1', b'"sequence_id":0')
    with pytest.raises(DecodeError, match="sequence_id"):
        decode_control(data)
    bad_trace = encode(SAMPLES["SpanRecorded"]).replace(b'"trace_id":"4bf9', b'"trace_id":"XXf9')
    with pytest.raises(DecodeError, match="trace_id"):
        decode_spans(bad_trace)


def test_unknown_fields_are_ignored() -> None:
    """Forward compatibility: an older reader decodes events from a newer writer."""
    event = SAMPLES["SpanRecorded"]
    newer = encode(event)[:-1] + b',"links":[{"span_id":"x"}],"schema_version":2}'
    decoded = decode_spans(newer)
    assert isinstance(decoded, SpanRecorded)
    assert decoded.schema_version == 2
    assert msgspec.structs.replace(decoded, schema_version=1) == event


@pytest.mark.parametrize("cls", struct_classes(), ids=lambda c: c.__name__)
def test_struct_config(cls: type[msgspec.Struct]) -> None:
    config = cls.__struct_config__
    assert config.frozen
    assert not config.forbid_unknown_fields
    assert not config.array_like


@pytest.mark.parametrize("tag", TAGS)
def test_events_are_keyword_only_and_frozen(tag: str) -> None:
    event = SAMPLES[tag]
    with pytest.raises(TypeError):
        type(event)(*msgspec.structs.astuple(event))
    with pytest.raises(AttributeError):
        event.event_id = "other"  # type: ignore[misc]


def test_kw_only_and_frozen_are_written_on_every_class() -> None:
    """msgspec does not inherit ``kw_only``, so the rule is checked in the source."""
    missing = []
    for path in sorted(SCHEMAS_DIR.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.bases and not _is_exception(node):
                given = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
                if given.get("frozen") is not True or given.get("kw_only") is not True:
                    missing.append(f"{path.name}:{node.name}")
    assert missing == []


def _is_exception(node: ast.ClassDef) -> bool:
    names = {b.id for b in node.bases if isinstance(b, ast.Name)}
    return bool(names & {"Exception", *_error_names()})


def _error_names() -> set[str]:
    return {n for n, v in vars(schemas).items() if isinstance(v, type) and issubclass(v, Exception)}


def test_stream_of() -> None:
    assert {tag: stream_of(e) for tag, e in SAMPLES.items()} == {
        tag: (
            "spans"
            if tag in {"SpanRecorded", "ModelCalled", "RewardReported", "AttemptHeartbeatSent", "SpanBatch"}
            else "control"
        )
        for tag in TAGS
    }


def test_encode_is_compact_and_tagged_first() -> None:
    event = AttemptStarted(event_id="e1", rollout_id="r", attempt_id="a", at=2.0)
    assert encode(event).startswith(b'{"type":"AttemptStarted","event_id":"e1","schema_version":1,')
