"""The restart loop of the coordinator and the inference follower: a failure restarts the body, a cancel ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats.errors
import pytest

from voltbus.services.restart import supervised


async def cancelled_once(body: Callable[[], Awaitable[None]], ready: asyncio.Event) -> None:
    """Run ``body`` under ``supervised`` until ``ready``, cancel it once: it must end, cancelled, within 5 s."""
    task = asyncio.create_task(supervised("body", body, 0.01))
    await asyncio.wait_for(ready.wait(), 5)
    task.cancel()
    await asyncio.wait([task], timeout=5)  # not wait_for: a loop that goes on would hang it
    assert task.done(), "the cancel did not stop the loop"
    assert task.cancelled()


async def test_a_failing_body_is_restarted() -> None:
    runs = 0
    again = asyncio.Event()

    async def body() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise nats.errors.ConnectionClosedError
        again.set()
        await asyncio.Event().wait()

    await cancelled_once(body, again)
    assert runs == 3


@pytest.mark.parametrize("turn", ["error", "swallowed"])
async def test_a_cancel_ends_it_even_when_the_body_hides_the_cancel(turn: str) -> None:
    """nats-py's unsubscribe raises on a closed connection inside a ``finally``; elsewhere it swallows cancels."""
    started = asyncio.Event()
    runs = 0

    async def body() -> None:
        nonlocal runs
        runs += 1
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if turn == "error":
                raise nats.errors.ConnectionClosedError from None
            return  # swallowed: the body just ends

    await cancelled_once(body, started)
    assert runs == 1
