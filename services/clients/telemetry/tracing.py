"""The tracer interface every emitter uses, the process-wide active tracer, and a tracer that exports nothing.

The runner's real tracer (OpenTelemetry, exporting spans to the log) implements the same interface.
"""

from __future__ import annotations

import time
from typing import Protocol

import msgspec

from voltbus.schemas.base import Attributes
from voltbus.schemas.spans import SpanStatus


class SpanCore(msgspec.Struct, kw_only=True):
    """The core fields of a span (Agent Lightning's ``SpanCoreFields``)."""

    name: str
    status: SpanStatus = SpanStatus(status_code="OK")
    attributes: Attributes = {}
    start_time: float | None = None
    end_time: float | None = None


class Tracer(Protocol):
    """What emitters need from a tracer."""

    def create_span(
        self,
        name: str,
        attributes: Attributes | None = None,
        timestamp: float | None = None,
        status: SpanStatus | None = None,
    ) -> SpanCore:
        """Create (and, for a real tracer, export) a zero-duration span."""
        ...


class DummyTracer:
    """Builds spans and exports nothing (emitters use it with ``propagate=False``)."""

    def create_span(
        self,
        name: str,
        attributes: Attributes | None = None,
        timestamp: float | None = None,
        status: SpanStatus | None = None,
    ) -> SpanCore:
        """A zero-duration span at ``timestamp`` (default now)."""
        at = time.time() if timestamp is None else timestamp
        return SpanCore(
            name=name,
            status=status or SpanStatus(status_code="OK"),
            attributes=dict(attributes or {}),
            start_time=at,
            end_time=at,
        )


_active: list[Tracer] = []


def set_active_tracer(tracer: Tracer) -> None:
    """Make ``tracer`` the one emitters use; there is no nesting."""
    if _active:
        raise ValueError("An active tracer is already set; clear it first")
    _active.append(tracer)


def clear_active_tracer() -> None:
    """Forget the active tracer."""
    _active.clear()


def get_active_tracer() -> Tracer | None:
    """The active tracer, or None."""
    return _active[0] if _active else None
