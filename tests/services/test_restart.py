"""The restart loop of the coordinator and the inference follower: a failure restarts the body, a cancel ends it."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from voltbus.services.restart import supervised


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

    task = asyncio.create_task(supervised("body", body, 0.01))
    await asyncio.wait_for(again.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
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

    task = asyncio.create_task(supervised("body", body, 0.01))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert runs == 1
