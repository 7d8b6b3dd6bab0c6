"""What a reader process and the projector say to each other over their socket: frames of the one codec
(``services/frames.py``; ``Start`` and ``States`` to the reader, ``Upto`` asks; ``Arrived``, ``Batch`` and
``Failed`` back), a batch's tables as Arrow IPC streams. See reader.py for the exchange."""

from __future__ import annotations

import logging

import msgspec

from voltbus.projections.prepare import Cut, Part
from voltbus.services.frames import Codec

BUFFERED = 64 << 20
"""Bytes of prepared batches held between a reader and the projector (a few batches of model calls)."""


class Start(msgspec.Struct, tag=True, kw_only=True):
    """What to read: a share of the stream from a sequence (to one, or on and on)."""

    settings: str
    """The bus settings, as JSON."""
    stream: str
    from_seq: int
    to_seq: int | None
    part: Part
    states: int
    """``States`` frames that follow (control: the folds of the share the projector has committed)."""
    log_level: int = logging.WARNING


class States(msgspec.Struct, tag=True, kw_only=True):
    """Folded rollout states, as ``rollout_states`` keeps them."""

    blobs: list[tuple[str, bytes]]


class Upto(msgspec.Struct, tag=True, kw_only=True):
    """The projector asks for the share's tables of the messages after the last cut, up to ``seq``."""

    seq: int


class Arrived(msgspec.Struct, tag=True, kw_only=True):
    """The reader has received the stream up to ``seq``."""

    seq: int
    seen: tuple[int, int]
    """The reader's feed subscriptions and connection reconnects so far (see rewind.Guard)."""


class Batch(Cut, tag=True, kw_only=True):
    """A share of a prepared batch (``prepare.Prepared``), its tables as Arrow IPC streams."""

    tables: list[tuple[str, memoryview]]
    seen: tuple[int, int]


class Failed(msgspec.Struct, tag=True, kw_only=True):
    """The reader could not go on."""

    reason: str
    cut: int | None = None
    """The cut it could not prepare (a row Arrow refused): the projector applies its events itself."""


Frame = Start | States | Upto | Arrived | Batch | Failed
FRAMES: Codec[Frame] = Codec(Frame)
"""Frames of this exchange, both ways."""
