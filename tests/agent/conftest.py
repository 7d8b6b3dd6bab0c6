"""Shared fixtures for the agent SDK tests: a tracer that records what emitters create."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from voltbus.schemas.base import Attributes
from voltbus.schemas.spans import SpanStatus
from voltbus.services.clients.telemetry.tracing import DummyTracer, SpanCore, clear_active_tracer, set_active_tracer


class RecordingTracer:
    """A tracer that keeps every span it creates."""

    def __init__(self) -> None:
        self.spans: list[SpanCore] = []

    def create_span(
        self,
        name: str,
        attributes: Attributes | None = None,
        timestamp: float | None = None,
        status: SpanStatus | None = None,
    ) -> SpanCore:
        span = DummyTracer().create_span(name, attributes, timestamp, status)
        self.spans.append(span)
        return span


@pytest.fixture
def tracer() -> Iterator[RecordingTracer]:
    """A recording tracer, active for the test."""
    clear_active_tracer()
    recording = RecordingTracer()
    set_active_tracer(recording)
    yield recording
    clear_active_tracer()


@pytest.fixture
def no_tracer() -> Iterator[None]:
    """No active tracer during the test."""
    clear_active_tracer()
    yield
    clear_active_tracer()
