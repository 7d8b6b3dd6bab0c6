"""Gateway admission events: pausing and resuming model calls around a weight swap (control stream).

Agent Lightning 1.0 keeps its pause state in memory only; here each change is a fact in the log, so
a run's history shows when sampling was stopped, by whom, and how long it stayed stopped.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .base import Event, Id, Timestamp


class GatewayPaused(Event, frozen=True, kw_only=True):
    """A gateway stopped admitting new model calls (they get 429); calls in flight finish."""

    gateway_id: Id
    """The gateway that paused."""
    reason: str | None = None
    """Why, as the caller said (e.g. ``weight swap to default:4``)."""
    retry_after_s: Annotated[int, msgspec.Meta(ge=0)]
    """``Retry-After`` seconds answered to refused calls."""
    inflight: Annotated[int, msgspec.Meta(ge=0)]
    """Calls in flight when it paused."""
    at: Timestamp
    """When it paused."""


class GatewayResumed(Event, frozen=True, kw_only=True):
    """A gateway admits model calls again."""

    gateway_id: Id
    """The gateway that resumed."""
    paused_s: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """How long it had been paused, when it knew."""
    versions: dict[str, str | None] = {}
    """The resources version each engine serves from now on, as the learner's weight push told it
    (engine URL without ``/v1`` → version; None: unknown, e.g. after a failed reload); the gateway
    labels the calls those engines serve with it. Empty: unchanged."""
    at: Timestamp
    """When it resumed."""


GatewayEvent = GatewayPaused | GatewayResumed
"""Every event on a gateway's subject."""
