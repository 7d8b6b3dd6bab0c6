"""The one codec: a JSON encoder and one decoder per stream union, each built once.

Decoding failures of any kind surface as :class:`~voltbus.schemas.errors.DecodeError`.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .errors import DecodeError
from .events import AnyEvent, ControlEvent
from .spans import SPAN_TYPES, SpanEvent

_encoder = msgspec.json.Encoder()
_control = msgspec.json.Decoder(ControlEvent)
_spans = msgspec.json.Decoder(SpanEvent)
_any = msgspec.json.Decoder(AnyEvent)


def encode(event: AnyEvent) -> bytes:
    """Encode an event to JSON bytes, its class name in the ``type`` field.

    >>> from voltbus.schemas.rollouts import AttemptStarted
    >>> encode(AttemptStarted(event_id="e1", rollout_id="ro-1", attempt_id="at-1", at=1.5))
    b'{"type":"AttemptStarted","event_id":"e1","schema_version":1,"rollout_id":"ro-1","attempt_id":"at-1","at":1.5,"holder_sig":null}'
    """
    return _encoder.encode(event)


def encode_checked(event: AnyEvent) -> bytes:
    """Encode an event, refusing one its own decoder would reject (msgspec checks constraints on decode).

    >>> from voltbus.schemas.rollouts import AttemptClaimed
    >>> encode_checked(AttemptClaimed(event_id="e", rollout_id="r", attempt_id="a", sequence_id=0, at=1))
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.DecodeError: undecodable event: Expected `int` >= 1 - at `$.sequence_id`
    """
    data = _encoder.encode(event)
    try:
        _any.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(str(exc)) from exc
    return data


def decode_control(data: bytes | bytearray | memoryview) -> ControlEvent:
    """Decode one control-stream event.

    >>> decode_control(b'{"type":"AttemptStarted","event_id":"e1","rollout_id":"r","attempt_id":"a","at":1}')
    AttemptStarted(event_id='e1', schema_version=1, rollout_id='r', attempt_id='a', at=1.0, holder_sig=None)
    """
    try:
        return _control.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(str(exc)) from exc


def decode_spans(data: bytes | bytearray | memoryview) -> SpanEvent:
    """Decode one spans-stream event.

    >>> decode_spans(b'{"type":"AttemptStarted"}')
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.DecodeError: undecodable event: Invalid value 'AttemptStarted' - at `$.type`
    """
    try:
        return _spans.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(str(exc)) from exc


def decode_any(data: bytes | bytearray | memoryview) -> AnyEvent:
    """Decode an event from either stream.

    >>> decode_any(b"not json")
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.DecodeError: undecodable event: JSON is malformed: invalid character (byte 4)
    """
    try:
        return _any.decode(data)
    except msgspec.DecodeError as exc:
        raise DecodeError(str(exc)) from exc


def stream_of(event: AnyEvent) -> Literal["control", "spans"]:
    """Which stream an event belongs on.

    >>> from voltbus.schemas.spans import AttemptHeartbeatSent
    >>> stream_of(AttemptHeartbeatSent(event_id="e", rollout_id="r", attempt_id="a", worker_id="w", at=0))
    'spans'
    """
    return "spans" if isinstance(event, SPAN_TYPES) else "control"
