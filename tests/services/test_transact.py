"""transact(): load, fold, decide, append with OCC, re-decide on conflict; a refused command appends nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec
import pytest

from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import IllegalTransition
from voltbus.schemas.events import AnyEvent
from voltbus.schemas.rollouts import AttemptStarted, RolloutCancelled, RolloutQueued
from voltbus.services.eventlog import EventLog


@dataclass(frozen=True)
class Step:
    """A test command: start attempt ``n`` (or cancel when n is 0)."""

    rollout_id: str
    n: int


class CounterDecider:
    """A minimal lifecycle: queued, then numbered attempts, each started at most once; cancel is terminal."""

    @staticmethod
    def initial_state() -> tuple[frozenset[int], bool]:
        return (frozenset(), False)

    @staticmethod
    def evolve(state: tuple[frozenset[int], bool], event: AnyEvent) -> tuple[frozenset[int], bool]:
        started, cancelled = state
        match event:
            case AttemptStarted():
                return (started | {int(event.attempt_id[1:])}, cancelled)
            case RolloutCancelled():
                return (started, True)
        return state

    @staticmethod
    def fold(state: tuple[frozenset[int], bool], event: AnyEvent, subject: str) -> tuple[frozenset[int], bool]:
        return CounterDecider.evolve(state, event)

    @staticmethod
    def decide(command: Step, state: tuple[frozenset[int], bool]) -> list[AnyEvent]:
        started, cancelled = state
        if cancelled:
            raise IllegalTransition(command.rollout_id, "cancelled", "Step")
        if command.n == 0:
            return [
                RolloutCancelled(event_id=derive_id(command.rollout_id, "cancel"), rollout_id=command.rollout_id, at=0)
            ]
        if command.n in started:
            return []  # already applied: idempotent
        return [
            AttemptStarted(
                event_id=derive_id(command.rollout_id, command.n),
                rollout_id=command.rollout_id,
                attempt_id=f"a{command.n}",
                at=command.n,
            )
        ]

    @staticmethod
    def is_terminal(state: tuple[frozenset[int], bool]) -> bool:
        return state[1]


async def create(log: EventLog, rid: str) -> None:
    raw = msgspec.Raw(b"{}")
    await log.append([RolloutQueued(event_id=derive_id(rid, "q"), rollout_id=rid, input=raw, queued_at=0)], 0)


async def test_transact_appends_then_repeat_is_a_no_op(eventlog: EventLog) -> None:
    await create(eventlog, "t1")
    first = await eventlog.transact(CounterDecider, "t1", Step("t1", 1))
    assert [e.attempt_id for e in first.events] == ["a1"] and first.state == (frozenset({1}), False)
    again = await eventlog.transact(CounterDecider, "t1", Step("t1", 1))
    assert again.events == [] and again.state == (frozenset({1}), False) and again.seq == first.seq
    assert len((await eventlog.read("t1"))[0]) == 2


async def test_refused_command_appends_nothing(eventlog: EventLog) -> None:
    await create(eventlog, "t2")
    await eventlog.transact(CounterDecider, "t2", Step("t2", 0))
    before = await eventlog.head("t2")
    with pytest.raises(IllegalTransition, match="cancelled"):
        await eventlog.transact(CounterDecider, "t2", Step("t2", 1))
    assert await eventlog.head("t2") == before


async def test_racing_transacts_each_apply_exactly_once(eventlog: EventLog) -> None:
    await create(eventlog, "t3")
    # ten writers each push the same five commands concurrently
    await asyncio.gather(
        *(eventlog.transact(CounterDecider, "t3", Step("t3", n)) for n in range(1, 6) for _ in range(10))
    )
    envelopes, _ = await eventlog.read("t3")
    # each of the five commands applied exactly once, whatever order the writers raced in
    assert sorted(e.event.attempt_id for e in envelopes[1:]) == ["a1", "a2", "a3", "a4", "a5"]
