"""The tests' ``wait_for`` on checks that never answer: a clear failure at its deadline, not a test that hangs
until pytest's own timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from . import conftest
from .conftest import wait_for


async def test_a_check_that_hangs_fails_at_the_deadline_with_what_was_awaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(conftest, "CHECK_GRACE_S", 0.2)
    calls = 0

    async def hangs() -> bool:
        nonlocal calls
        calls += 1
        if calls < 3:
            return False
        await asyncio.Event().wait()  # as a read of an object whose chunks were replaced under it
        return True

    started = time.monotonic()
    with pytest.raises(AssertionError, match="waiting for the snapshot: its check hung"):
        await wait_for(hangs, 0.5, "the snapshot")
    assert calls == 3
    assert time.monotonic() - started < 30  # well short of pytest's 120 s timeout, on any machine


async def test_a_slow_check_begun_before_the_deadline_may_still_answer() -> None:
    async def slow() -> str:
        await asyncio.sleep(0.3)  # longer than the whole timeout below, shorter than the grace
        return "answered"

    assert await wait_for(slow, 0.1, "a slow answer") == "answered"
