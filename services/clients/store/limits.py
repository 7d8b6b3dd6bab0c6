"""Span size limits: a value too long is cut with a marker, never dropped unsaid.

An agent can put anything in a span's attributes (a whole document, a long list). Each value is
kept up to ``span_value_max_bytes`` (a string is cut and ends with ``…[truncated N bytes]``; any
other value becomes its JSON text, cut the same way) and a span's values together up to
``span_max_bytes``; attributes past that budget are left out. A span that was cut says so:
``voltbus.truncated`` lists the keys cut (``event[i].key`` for a span event's) and
``voltbus.dropped_attributes`` counts those left out; a warning names the span.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from .types import Span

log = logging.getLogger(__name__)

MARK = "…[truncated {} bytes]"
MAX_KEY = 256
"""Longest attribute key kept whole."""


def clip_value(value: Any, limit: int) -> tuple[Any, bool]:
    """``value`` within ``limit`` bytes of UTF-8 (or of JSON, for a non-string), and whether it was cut.

    >>> clip_value("abcdef", 4)
    ('abcd…[truncated 2 bytes]', True)
    >>> clip_value([1, 2, 3], 4)
    ('[1,2…[truncated 3 bytes]', True)
    >>> clip_value(7, 4)
    (7, False)
    """
    raw = value.encode() if isinstance(value, str) else msgspec.json.encode(value)
    if len(raw) <= limit:
        return value, False
    kept = raw[:limit].decode(errors="ignore")
    return kept + MARK.format(len(raw) - len(kept.encode())), True


class Clipper:
    """Clips the attributes of one span against a shared byte budget."""

    def __init__(self, value_max: int, span_max: int) -> None:
        self.value_max, self.left = value_max, span_max
        self.cut: list[str] = []
        self.dropped = 0

    def attributes(self, attrs: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        """``attrs`` within the limits, recording what was cut or left out."""
        out: dict[str, Any] = {}
        for key, value in attrs.items():
            if self.left <= 0:
                self.dropped += 1
                continue
            name = key if len(key) <= MAX_KEY else key[:MAX_KEY] + "…"
            clipped, was_cut = clip_value(value, min(self.value_max, self.left))
            self.left -= len(name) + len(clipped.encode() if isinstance(clipped, str) else msgspec.json.encode(clipped))
            if was_cut or name != key:
                self.cut.append(prefix + name)
            out[name] = clipped
        return out


def fits(span: Span, limit: int) -> bool:
    """Whether the span's attributes (and its events') cannot be over ``limit``: their JSON text, which is at
    least as long as the keys and values the Clipper counts, is shorter, and no key is too long. One encode
    instead of one per value; False (the Clipper decides) when a value is not JSON.

    >>> fits(Span(rollout_id="r", attempt_id="a", sequence_id=1, trace_id="t", span_id="s", name="n",
    ...      attributes={"k": "v" * 10}), 20)
    True
    """
    try:
        size = len(msgspec.json.encode(span.attributes)) + sum(
            len(msgspec.json.encode(e.attributes)) for e in span.events
        )
    except (TypeError, ValueError, OverflowError):
        return False
    dicts = [span.attributes, *(e.attributes for e in span.events)]
    return size < limit and all(len(k) <= MAX_KEY for attrs in dicts for k in attrs)


def clip_span(span: Span, value_max: int, span_max: int) -> Span:
    """``span`` with its attributes (and its events') within the limits; the span itself when they fit."""
    return span if fits(span, min(value_max, span_max)) else clipped(span, value_max, span_max)


def clipped(span: Span, value_max: int, span_max: int) -> Span:
    """``clip_span`` value by value (what ``fits`` spares a span that is well within the limits)."""
    clipper = Clipper(value_max, span_max)
    attributes = clipper.attributes(span.attributes)
    events = [
        msgspec.structs.replace(e, attributes=clipper.attributes(e.attributes, f"event[{i}].")) if e.attributes else e
        for i, e in enumerate(span.events)
    ]
    if not clipper.cut and not clipper.dropped:
        return span
    if clipper.cut:
        attributes["voltbus.truncated"] = clipper.cut
    if clipper.dropped:
        attributes["voltbus.dropped_attributes"] = clipper.dropped
    log.warning(
        "rollout_id=%s attempt_id=%s span %s (%s) over the size limits: cut %s, left out %d attribute(s)",
        span.rollout_id,
        span.attempt_id,
        span.span_id,
        span.name,
        clipper.cut,
        clipper.dropped,
    )
    return msgspec.structs.replace(span, attributes=attributes, events=events)
