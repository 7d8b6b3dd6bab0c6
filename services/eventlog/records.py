"""What the event log hands back: stored events with their position, undecodable messages, appends."""

from __future__ import annotations

import msgspec

from voltbus.schemas.codec import AnyEvent


class Envelope(msgspec.Struct, frozen=True, kw_only=True):
    """One decoded event as stored: its stream sequence, subject and server time."""

    seq: int
    """Stream sequence (1-based, gap-free on our deny-delete streams)."""
    subject: str
    """Subject the event was stored under."""
    time: float
    """Server receive time, seconds since the epoch (informational; never used to decide)."""
    event: AnyEvent
    """The decoded event."""


class BadEvent(msgspec.Struct, frozen=True, kw_only=True):
    """A stored message that does not decode: reported with its position, never skipped silently."""

    seq: int
    """Stream sequence of the message."""
    subject: str
    """Subject it was stored under."""
    data: bytes
    """The raw payload."""
    reason: str
    """Why it could not be decoded."""
    time: float = 0.0
    """When the server stored it (seconds since the epoch); 0.0 if unknown."""


class Passed(msgspec.Struct, frozen=True, kw_only=True):
    """A stored message this reader was told to leave to another (not decoded): only its position."""

    seq: int
    subject: str
    time: float


class Appended(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of an append that is now in the log."""

    seq: int
    """Stream sequence of the last event of the append."""
    already_applied: bool = False
    """True when an earlier try of the same append had been stored (retry after an unknown outcome)."""
