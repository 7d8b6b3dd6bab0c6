"""Base classes and shared aliases of the event contract.

Every event is a frozen, keyword-only msgspec Struct, tagged by its class name in the ``type``
field. ``kw_only`` is not inherited by msgspec, so every subclass repeats it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Literal

import msgspec

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
"""An identifier: rollout, attempt, span, resources, run or worker id."""

Timestamp = float
"""Seconds since the Unix epoch, as a float (Agent Lightning's convention)."""

Json = msgspec.Raw
"""Any JSON value, kept verbatim (task inputs, free-form payloads)."""

AttributeValue = str | bool | int | float | list[str | bool | int | float]
"""An OpenTelemetry attribute value: a scalar or a list of scalars.

msgspec allows one list type per union, so the list's items are not forced to share one type.
"""

Attributes = dict[str, AttributeValue]
"""OpenTelemetry-style attributes."""

Mode = Literal["train", "val", "test"]
"""What a rollout is for."""

SCHEMA_VERSION = 1
"""The contract version new events are written with."""

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class Event(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="type"):
    """Base of every event on the log."""

    event_id: Id
    """Deterministic id, used as ``Nats-Msg-Id`` so a retried append is stored once."""
    schema_version: int = SCHEMA_VERSION
    """Contract version the producer wrote; readers accept any version up to theirs."""


class Command(msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="type"):
    """Base of every command a decider accepts; ids and times arrive inside."""


def is_token(value: str) -> bool:
    """True when ``value`` can be one token of a NATS subject.

    >>> is_token("ro-1_a"), is_token("a.b"), is_token("*"), is_token("")
    (True, False, False, False)
    """
    return bool(_TOKEN.match(value))


def derive_id(*parts: str | int) -> str:
    """A stable 32-hex-digit id derived from its parts (same parts, same id).

    >>> derive_id("ro-1", "claim", 2) == derive_id("ro-1", "claim", 2)
    True
    >>> len(derive_id("x"))
    32
    """
    text = "\x1f".join(str(p) for p in parts)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
