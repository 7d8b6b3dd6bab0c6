"""Agent Lightning's ``adapter.base``: the ``Adapter`` base class (``adapter(source)`` is ``adapter.adapt(source)``)."""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["Adapter", "TraceAdapter"]

T_in = TypeVar("T_in")
T_out = TypeVar("T_out")


class Adapter(Generic[T_in, T_out]):
    """Agent Lightning's adapter base: ``adapter(source)`` is ``adapter.adapt(source)``."""

    def __call__(self, source: T_in, /) -> T_out:
        return self.adapt(source)

    def adapt(self, source: T_in, /) -> T_out:
        """Convert ``source``."""
        raise NotImplementedError


TraceAdapter = Adapter
"""Agent Lightning's base of adapters over spans."""
