"""A body run forever and restarted after a failure, which a cancel always ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


def cancelled() -> bool:
    """Whether the running task was asked to stop, even if something below swallowed the cancel.

    nats-py does both in places: an unsubscribe in a ``finally`` raises once the connection is closed
    (the error replaces the cancel), and several of its loops catch ``CancelledError`` and return.
    """
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def stop_if_cancelled() -> None:
    """Raise ``CancelledError`` when the running task was asked to stop: for a loop that goes on after an
    error, which may have stood for the cancel."""
    if cancelled():
        raise asyncio.CancelledError


async def supervised(
    name: str, body: Callable[[], Awaitable[None]], delay: float, logger: logging.Logger = log
) -> None:
    """Run ``body`` forever, starting it again ``delay`` seconds after it fails or ends."""
    while True:
        try:
            await body()
        except Exception:
            if not cancelled():
                logger.exception("%s failed; restarting in %.1fs", name, delay)
        stop_if_cancelled()
        await asyncio.sleep(delay)
