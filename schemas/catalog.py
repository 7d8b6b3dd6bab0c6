"""The catalog of event types and their JSON Schemas, as committed under ``schemas/json/``.

Pure: ``voltbus schemas export`` writes :func:`json_schemas` to disk, and a test compares.
"""

from __future__ import annotations

import typing

import msgspec

from .events import AnyEvent

EVENT_TYPES: tuple[type[msgspec.Struct], ...] = typing.get_args(AnyEvent)
"""Every event class, control stream first, in union order."""


def schema_bytes(cls: type[msgspec.Struct]) -> bytes:
    """The JSON Schema of one class as deterministic pretty JSON (sorted keys, trailing newline).

    >>> from voltbus.schemas.rollouts import AttemptStarted
    >>> b'"AttemptStarted"' in schema_bytes(AttemptStarted), schema_bytes(AttemptStarted).endswith(b"}\\n")
    (True, True)
    """
    raw = msgspec.json.encode(msgspec.json.schema(cls), order="sorted")
    return msgspec.json.format(raw, indent=2) + b"\n"


def json_schemas() -> dict[str, bytes]:
    """Map ``"<Tag>.json"`` to the JSON Schema bytes of every event type.

    >>> sorted(json_schemas())[:2]
    ['AttemptClaimed.json', 'AttemptFailed.json']
    """
    return {f"{cls.__name__}.json": schema_bytes(cls) for cls in EVENT_TYPES}
