"""What a reader process and the projector say to each other over their socket: frames of the one codec
(``services/frames.py``; ``Start`` to the reader, ``Upto`` asks and ``States`` answers to its ``Need``; ``Arrived``,
``Batch``, ``Need`` and ``Failed`` back), a batch's tables as Arrow IPC streams. See reader.py for the exchange."""

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
    kept: int
    """Most folded rollout states the reader keeps (control: the most recently changed; ``prepare.STATES_KEPT``)."""
    log_level: int = logging.WARNING


class Need(msgspec.Struct, tag=True, kw_only=True):
    """The reader asks for the committed folds of rollouts it keeps no state of (it forgot them, or never had them)."""

    rollout_ids: list[str]


class States(msgspec.Struct, tag=True, kw_only=True):
    """The answer to a ``Need``: the folded states the database holds of them, as ``rollout_states`` keeps them."""

    blobs: list[tuple[str, bytes]]


class Upto(msgspec.Struct, tag=True, kw_only=True):
    """The projector asks for the share's tables of the messages after the last cut, up to ``seq``."""

    seq: int
    committed: int = 0
    """The stream's position the projector has committed: the reader may forget states no later event changed."""


class Arrived(msgspec.Struct, tag=True, kw_only=True):
    """The reader has received the stream up to ``seq``."""

    seq: int
    seen: tuple[int, int]
    """The reader's feed subscriptions and connection reconnects so far (see rewind.Guard)."""


class Batch(Cut, tag=True, kw_only=True):
    """A share of a prepared batch (``prepare.Prepared``), its tables as Arrow IPC streams."""

    tables: list[tuple[str, memoryview]]
    seen: tuple[int, int]
    folds: int = 0
    """Folded rollout states the reader keeps after preparing it."""


class Failed(msgspec.Struct, tag=True, kw_only=True):
    """The reader could not go on."""

    reason: str
    cut: int | None = None
    """The cut it could not prepare (a row Arrow refused): the projector applies its events itself."""


Frame = Start | Need | States | Upto | Arrived | Batch | Failed
FRAMES: Codec[Frame] = Codec(Frame)
"""Frames of this exchange, both ways."""
