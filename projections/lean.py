"""The projector's decoder of the spans stream: a ModelCalled's token ids and logprobs stay JSON text.

Decoding 256 + 128 token ids and 128 logprobs into Python objects is most of the cost of reading a
model call, and turning them into Arrow lists costs as much again (BENCHMARKS.md, "Projections"). The projector only
stores them, so :func:`decode_spans` keeps them as :class:`msgspec.Raw` text (everything else is
decoded and checked as usual) and DuckDB turns the text into ``INTEGER[]`` / ``DOUBLE[]`` columns in
the ModelCalled block (``from_json_strict``).

The text is taken only if it is plainly a list of numbers (:func:`plain_numbers`); anything else is
decoded by the strict codec, so a wrong value is refused with the codec's reason and its message goes
to quarantine exactly as before. If DuckDB still refuses a batch (a nested list), the projector applies
it again with every lean event decoded strictly from its stored message (:func:`strict`); should that
fail too (a token id beyond ``INTEGER``), it applies the batch in halves and quarantines the events that
fail alone, with their stored message.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from voltbus.schemas import codec
from voltbus.schemas.base import Event
from voltbus.schemas.spans import AttemptHeartbeatSent, ModelCalled, RewardReported, SpanBatch, SpanEvent, SpanRecorded
from voltbus.services.eventlog import EventLog, Feed

LISTS = {"prompt_ids": False, "response_ids": False, "logprobs": True}
"""ModelCalled fields kept as JSON text, with whether they hold floats (else integers)."""
_EMPTY = msgspec.Raw(b"[]")
_SPACE = b" \t\r\n"
_INT_CHARS = b"0123456789,-[]" + _SPACE
_KINDS = bytes(
    48 if b in b"0123456789" else 101 if b in b"eE" else 46 if b in _INT_CHARS + b".+" else 120 for b in range(256)
)
"""A ``bytes.translate`` table for float lists: a digit to ``0``, an exponent to ``e``, anything else a float
list may hold to ``.``, the rest to ``x``."""
_LONG_EXPONENT = re.compile(rb"e\.?000")
"""An exponent of three digits or more in a float list's ``_KINDS`` (its sign reads ``.``). Searched in those
rather than in the text, where a pattern that starts with ``[eE]`` is several times slower (BENCHMARKS.md,
"Projections")."""
_LONG_DIGITS = b"0" * 100
"""A run of digits this long: below it and below exponent 100, a float is within 1e-198..1e198, no
overflow, no underflow, read alike by msgspec and DuckDB (a longer run goes to the strict codec)."""


def _lean_fields() -> list[tuple[Any, ...]]:
    fields: list[tuple[Any, ...]] = [("stored", bytes, msgspec.field(default=b"", name="voltbus:stored"))]
    for f in msgspec.structs.fields(ModelCalled):
        if f.name in ("event_id", "schema_version"):  # from the Event base
            continue
        if f.name in LISTS:
            fields.append((f.name, msgspec.Raw, _EMPTY))
        elif f.default is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, f.default))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type))
    return fields


LeanModelCalled = msgspec.defstruct(
    "ModelCalled", _lean_fields(), bases=(Event,), kw_only=True, frozen=True, module=__name__
)
"""ModelCalled with ``prompt_ids``, ``response_ids`` and ``logprobs`` as JSON text (same tag, same fields),
and ``stored``: the message it was decoded from (set after decoding)."""

LeanItem = SpanRecorded | LeanModelCalled | RewardReported | AttemptHeartbeatSent  # type: ignore[valid-type]


class LeanSpanBatch(SpanBatch, frozen=True, kw_only=True, tag="SpanBatch"):
    """A SpanBatch whose model calls are read lean, and ``stored``: the message it was decoded from."""

    events: list[LeanItem]  # type: ignore[assignment]
    stored: bytes = msgspec.field(default=b"", name="voltbus:stored")


_lean = msgspec.json.Decoder(LeanItem | LeanSpanBatch)


def plain_numbers(raw: bytes, floats: bool) -> bool:
    """Whether ``raw`` holds nothing but JSON numbers of the right kind (integers unless ``floats``),
    commas, brackets and white space, and no trailing comma.

    This only rules out what DuckDB's ``from_json_strict`` would take but msgspec refuses (strings of
    digits, true/false/null, fractions for integers, a trailing comma, a float out of range: an exponent
    of three digits or more, which is 100 or more unless it has leading zeros, or 100 digits in a row);
    DuckDB refuses nesting, and msgspec has already checked that the text is valid JSON.

    >>> plain_numbers(b"[1,-2, 3]", False), plain_numbers(b"[1.5]", False), plain_numbers(b"[-1.5e-05,2]", True)
    (True, False, True)
    >>> plain_numbers(b'["1"]', False), plain_numbers(b"[1,]", False), plain_numbers(b"[1 ,\\n]", True)
    (False, False, False)
    >>> plain_numbers(b"[true]", True), plain_numbers(b"[1e400]", True), plain_numbers(b"null", True)
    (False, False, False)
    >>> plain_numbers(b"[1" + b"0" * 98 + b"e99]", True), plain_numbers(b"[1" + b"0" * 99 + b"]", True)
    (True, False)
    >>> plain_numbers(b"[-1.2e-05,3E+99]", True), plain_numbers(b"[1e-100]", True), plain_numbers(b"[1E+005]", True)
    (True, False, False)
    """
    if floats:
        kinds = raw.translate(_KINDS)
        if b"x" in kinds or _LONG_DIGITS in kinds:
            return False
        if b"e" in kinds and _LONG_EXPONENT.search(kinds):
            return False
    elif raw.translate(None, _INT_CHARS):
        return False
    tail = raw[-16:].rstrip(_SPACE)[:-1].rstrip(_SPACE)  # before the closing bracket
    return tail[-1:] not in (b",", b"")


def decode_spans(data: bytes | bytearray | memoryview) -> SpanEvent:
    """Decode a spans-stream event, a ModelCalled's number lists as text when they are plainly numbers.

    Raises :class:`~voltbus.schemas.errors.DecodeError` exactly when the strict codec does.
    """
    try:
        event = _lean.decode(data)
    except msgspec.DecodeError:
        return codec.decode_spans(data)  # raises with the codec's reason
    batch = isinstance(event, LeanSpanBatch)
    if not batch and not isinstance(event, LeanModelCalled):
        return event  # type: ignore[no-any-return]
    calls = [e for e in event.events if isinstance(e, LeanModelCalled)] if batch else [event]
    if not all(plain_numbers(bytes(getattr(c, n)), f) for c in calls for n, f in LISTS.items()):
        return codec.decode_spans(data)
    msgspec.structs.force_setattr(event, "stored", bytes(data))  # for strict(), should DuckDB refuse it
    return event  # type: ignore[no-any-return]


def projector_feed(log_: EventLog, stream: str) -> Feed:
    """A feed of ``stream``; the spans feed decodes with the projector's lean decoder."""
    feed = log_.feed(stream)  # type: ignore[arg-type]
    if stream == "spans":
        feed.decode = decode_spans
    return feed


def is_lean(event: object) -> bool:
    """Whether ``event`` came from the lean decoder (a model call read lean, or a batch)."""
    return isinstance(event, LeanModelCalled | LeanSpanBatch)


def strict(event: Any) -> SpanEvent:
    """The strict codec's reading of a lean event's stored message (DecodeError when it refuses it)."""
    return codec.decode_spans(event.stored)
