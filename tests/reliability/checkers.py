"""Checkers over a whole history: what the log holds after the faults, against what clients were told.

Each checker returns the violations it found (empty: the property holds), so a test can both assert
on them and count them in its result row.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, get_args

from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptUpdated,
    RolloutEvent,
    RolloutRequeued,
    RolloutUpdated,
)
from voltbus.services.eventlog import BadEvent, Envelope, EventLog
from voltbus.services.lifecycle import decider
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

ROLLOUT_EVENTS = get_args(RolloutEvent)
UPDATES = (RolloutUpdated, AttemptUpdated)
"""Events that may legitimately change nothing (a repeated heartbeat time, the same metadata)."""

Stored = Sequence[Envelope | BadEvent]


async def stored_control(log: EventLog) -> list[Envelope | BadEvent]:
    """Every message of the control stream, in order."""
    return [item async for item in log.replay("control")]


def event_ids(stored: Stored) -> list[str]:
    """The event id of every decodable stored event, duplicates included."""
    return [e.event.event_id for e in stored if isinstance(e, Envelope)]


def lost(acknowledged: Iterable[str], stored: Stored) -> set[str]:
    """Event ids a client was told are stored (ok) that the log does not hold."""
    return set(acknowledged) - set(event_ids(stored))


def duplicated(stored: Stored) -> list[str]:
    """Events stored twice, and transitions made twice (one transition per command and attempt)."""
    ids = Counter(event_ids(stored))
    found = [f"event {i} stored {n} times" for i, n in ids.items() if n > 1]
    transitions = Counter(
        (e.event.rollout_id, type(e.event).__name__, getattr(e.event, "attempt_id", None))
        for e in stored
        if isinstance(e, Envelope) and isinstance(e.event, ROLLOUT_EVENTS) and not isinstance(e.event, UPDATES)
    )
    found += [f"{r} {kind} attempt={a} made {n} times" for (r, kind, a), n in transitions.items() if n > 1]
    return found


def histories(stored: Stored) -> dict[str, list[Any]]:
    """Each rollout's events in stream order."""
    found: dict[str, list[Any]] = defaultdict(list)
    for e in stored:
        if isinstance(e, Envelope) and isinstance(e.event, ROLLOUT_EVENTS):
            found[e.event.rollout_id].append(e.event)
    return dict(found)


def path_error(events: Sequence[Any]) -> str | None:
    """Why this history is not a path of the rollout state machine (None: it is one).

    Folded through the decider's ``evolve``: every event but an update must change the state (evolve
    ignores exactly the events that ``decide`` could not have produced there), nothing but updates
    may follow a terminal state, a claim must consume the rollout's current dispatch and number its
    attempt next, and a requeue must follow the end of the latest attempt.
    """
    state = decider.initial_state()
    for i, event in enumerate(events):
        name = f"#{i} {type(event).__name__}"
        if decider.is_terminal(state) and not isinstance(event, UPDATES):
            return f"{name} after the terminal state {state.status}"
        if isinstance(event, AttemptClaimed):
            if event.dispatch_event_id is not None and event.dispatch_event_id != state.dispatch_event_id:
                return f"{name} consumed dispatch {event.dispatch_event_id}, not the current one"
            if event.sequence_id != len(state.attempts) + 1:
                return f"{name} numbered {event.sequence_id} after {len(state.attempts)} attempts"
        if isinstance(event, RolloutRequeued) and state.latest is not None and state.latest.status in ACTIVE_ATTEMPT:
            return f"{name} while attempt {state.latest.attempt_id} is still {state.latest.status}"
        after = decider.evolve(state, event)
        if after == state and not isinstance(event, UPDATES):
            return f"{name} is not a transition from {state.status}"
        state = after
    return None


def invalid_paths(stored: Stored) -> dict[str, str]:
    """Rollouts whose history is not a valid path, with the reason."""
    found = {rid: path_error(events) for rid, events in histories(stored).items()}
    return {rid: why for rid, why in found.items() if why is not None}


def not_terminal(stored: Stored, rollout_ids: Iterable[str] | None = None) -> list[str]:
    """Rollouts (all, or those named) whose history does not end in a terminal state."""
    found = histories(stored)
    wanted = found.keys() if rollout_ids is None else rollout_ids
    ends = {rid: fold(found.get(rid, [])) for rid in wanted}
    return sorted(rid for rid, state in ends.items() if not decider.is_terminal(state))


def fold(events: Sequence[Any]) -> Any:
    """The state a rollout's events fold into."""
    state = decider.initial_state()
    for event in events:
        state = decider.evolve(state, event)
    return state


Tables = dict[str, list[tuple[object, ...]]]


def table_differences(live: Tables, rebuilt: Tables) -> list[str]:
    """Tables whose rows differ between a live projection and a full replay (the projection tests' ``dump``)."""
    return [
        f"{t}: live {len(rows)} rows, replay {len(rebuilt.get(t, []))}"
        for t, rows in live.items()
        if rows != rebuilt.get(t)
    ]


async def replay_differences(log: EventLog, live_db: Path, scratch: Path) -> list[str]:
    """Rebuild every table from sequence 1 into ``scratch`` and compare it with the live database."""
    from tests.projections.conftest import dump
    from tests.projections.test_projector import build
    from voltbus.store import Store

    return table_differences(dump(live_db), await build(Store(log), scratch))
