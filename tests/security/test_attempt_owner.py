"""A runner ends only the attempt it holds: ``FinishAttempt.worker_id`` is checked by the decider.

The worker id is self-declared, so this stops a confused or stale worker; the holder's key stops a hostile
one holding runner credentials (test_attempt_authority.py). On an unkeyed attempt, commands without a worker
id (older clients, the store API called without one) are decided as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from voltbus.schemas.commands import ClaimRollout, FinishAttempt, QueueRollout, UpdateAttempt
from voltbus.schemas.errors import IllegalTransition
from voltbus.schemas.rollouts import AttemptFailed, AttemptSucceeded, RolloutEvent
from voltbus.services.eventlog import EventLog
from voltbus.services.eventlog.records import BadEvent, Envelope
from voltbus.services.lifecycle.decider import decide, evolve, initial_state
from voltbus.services.lifecycle.state import RolloutState
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect

R, A = "ro-1", "at-1"


def claimed_by(worker: str | None) -> RolloutState:
    """A rollout whose attempt ``A`` was claimed by ``worker``, folded through the real decider."""
    state = initial_state()
    queue = QueueRollout(rollout_id=R, input=msgspec.Raw(b"{}"), at=1.0)
    for event in decide(queue, state):
        state = evolve(state, event)
    claim = ClaimRollout(rollout_id=R, attempt_id=A, dispatch_event_id=state.dispatch_event_id or "", at=2.0)
    for event in decide(msgspec.structs.replace(claim, worker_id=worker), state):
        state = evolve(state, event)
    return state


def finish(worker: str | None = None) -> FinishAttempt:
    cmd = FinishAttempt(rollout_id=R, attempt_id=A, status="succeeded", at=3.0)
    return cmd if worker is None else msgspec.structs.replace(cmd, worker_id=worker)


def test_the_holder_ends_its_attempt() -> None:
    [ended] = decide(finish("w-1"), claimed_by("w-1"))
    assert isinstance(ended, AttemptSucceeded) and ended.attempt_id == A


def test_another_worker_cannot_end_it() -> None:
    with pytest.raises(IllegalTransition, match="held by worker 'w-1', not 'w-2'"):
        decide(finish("w-2"), claimed_by("w-1"))


def test_another_worker_cannot_end_it_even_as_a_repeat() -> None:
    state = claimed_by("w-1")
    for event in decide(finish("w-1"), state):
        state = evolve(state, event)
    with pytest.raises(IllegalTransition, match="held by worker"):
        decide(finish("w-2"), state)


def test_without_a_worker_id_the_end_is_decided_as_before() -> None:
    assert len(decide(finish(), claimed_by("w-1"))) == 1
    assert len(decide(finish("w-2"), claimed_by(None))) == 1  # nobody holds it: any worker may end it


def test_a_reassigned_attempt_belongs_to_its_new_worker() -> None:
    state = claimed_by("w-1")
    for event in decide(UpdateAttempt(rollout_id=R, attempt_id=A, worker_id="w-2", at=2.5), state):
        state = evolve(state, event)
    with pytest.raises(IllegalTransition):
        decide(finish("w-1"), state)
    assert len(decide(finish("w-2"), state)) == 1


def test_the_worker_id_is_additive_on_the_wire() -> None:
    """Unset, the field is not encoded: a command without it encodes (and derives event ids) as before."""
    assert b"worker_id" not in msgspec.json.encode(finish())
    assert msgspec.json.decode(msgspec.json.encode(finish("w-1")), type=FinishAttempt).worker_id == "w-1"


@pytest.fixture
async def two_runners(nats_settings: NatsSettings) -> AsyncIterator[tuple[Store, Store]]:
    first, second = await connect(settings=nats_settings), await connect(settings=nats_settings, name="second")
    yield first, second
    await first.close()
    await second.close()


def ends(stored: list[Envelope | BadEvent]) -> list[RolloutEvent]:
    """The attempt endings among a rollout's stored events."""
    events = [e.event for e in stored if isinstance(e, Envelope)]
    return [e for e in events if isinstance(e, AttemptSucceeded | AttemptFailed)]


async def test_through_the_bus_a_second_runner_cannot_end_the_first_runner_s_attempt(
    two_runners: tuple[Store, Store], eventlog: EventLog
) -> None:
    first, second = two_runners
    queued = await first.enqueue_rollout({"q": 1})
    claimed = await first.dequeue_rollout(worker_id="w-1")
    assert claimed is not None and claimed.rollout_id == queued.rollout_id and claimed.attempt.worker_id == "w-1"
    rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
    with pytest.raises(IllegalTransition, match="held by"):  # its key, then its worker id (see test_attempt_authority)
        await second.finish_attempt(rid, aid, worker_id="w-2")
    events, _ = await eventlog.read(rid)
    assert ends(events) == []  # nothing was appended for the refused end
    attempt = await first.finish_attempt(rid, aid, worker_id="w-1")
    assert attempt.status == "succeeded"
    events, _ = await eventlog.read(rid)
    assert [type(e).__name__ for e in ends(events)] == ["AttemptSucceeded"]
