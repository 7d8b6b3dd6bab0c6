"""Running a service's main coroutine on uvloop's event loop when it is installed (a dependency, but not on
every platform): its loop and transports cost less CPU than asyncio's (the gateway per call, a runner per
rollout: BENCHMARKS.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``, on uvloop's loop where there is one."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - not on every platform
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
