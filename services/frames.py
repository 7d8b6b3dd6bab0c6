"""Length-prefixed msgpack frames: the one codec of the framed protocols between voltbus processes (a runner and
its agent processes over pipes, the projector and its reader processes over sockets)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

T = TypeVar("T")
HEAD = struct.Struct(">I")
"""A frame's head: the length of its body, 4 bytes big-endian."""


class FrameTooLarge(ValueError):
    """A frame's head announces more bytes than the reading side accepts."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a frame of {size} bytes")
        self.size = size


def frame(body: bytes) -> bytes:
    """``body`` with its length in front.

    >>> frame(b"ab")
    b'\\x00\\x00\\x00\\x02ab'
    """
    return HEAD.pack(len(body)) + body


def _size(head: bytes | bytearray, limit: int | None) -> int:
    (size,) = HEAD.unpack(head)
    if limit is not None and size > limit:
        raise FrameTooLarge(size)
    return size


def receive(read_into: Callable[[memoryview], int], limit: int | None = None) -> bytearray:
    """The body of the next frame, read by blocking calls of ``read_into`` (``socket.recv_into``, or
    ``os.readv`` on a descriptor); raises ``EOFError`` when the other side closed, ``FrameTooLarge`` past ``limit``.

    >>> import io
    >>> source = io.BytesIO(frame(b"ab") + frame(b"cde"))
    >>> bytes(receive(source.readinto)), bytes(receive(source.readinto))
    (b'ab', b'cde')
    >>> receive(io.BytesIO(frame(b"abc")).readinto, limit=2)
    Traceback (most recent call last):
    ...
    voltbus.services.frames.FrameTooLarge: a frame of 3 bytes
    """
    return _exactly(read_into, _size(_exactly(read_into, HEAD.size), limit))


def _exactly(read_into: Callable[[memoryview], int], size: int) -> bytearray:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = read_into(view[got:])
        if n == 0:
            raise EOFError("closed")
        got += n
    return data


async def next_frame(reader: asyncio.StreamReader, limit: int | None = None) -> bytes:
    """The body of the next frame from ``reader``; raises ``asyncio.IncompleteReadError`` when the other side
    closed, ``FrameTooLarge`` past ``limit``."""
    size = _size(await reader.readexactly(HEAD.size), limit)
    return await reader.readexactly(size)


class Codec(Generic[T]):
    """Messages of one protocol as frames: msgpack bodies, decoded as one type (a tagged union, usually)."""

    def __init__(self, type_: Any) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder: msgspec.msgpack.Decoder[T] = msgspec.msgpack.Decoder(type_)

    def frame(self, message: Any) -> bytes:
        """``message`` as one frame."""
        return frame(self._encoder.encode(message))

    def decode(self, body: bytes | bytearray | memoryview) -> T:
        """A frame's body as a message; raises ``msgspec.DecodeError`` (or ``ValidationError``) if it is none."""
        return self._decoder.decode(body)
