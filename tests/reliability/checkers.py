"""Checkers over a whole history: what the log holds after the faults, against what clients were told.

Each checker returns the violations it found (empty: the property holds), so a test can both assert
on them and count them in its result row.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, get_args

import msgspec

from voltbus.schemas import commands
from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptSucceeded,
    AttemptUpdated,
    RolloutEvent,
    RolloutRequeued,
    RolloutUpdated,
)
from voltbus.schemas.spans import RewardReported, SpanBatch, items_of
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


async def stored_spans(log: EventLog) -> list[Envelope | BadEvent]:
    """Every event of the spans stream (spans, model calls, rewards), in order: a batch (a runner's flush,
    one message) as its events, each with the batch's sequence."""
    found: list[Envelope | BadEvent] = []
    async for item in log.replay("spans"):
        if isinstance(item, Envelope) and isinstance(item.event, SpanBatch):
            found += [msgspec.structs.replace(item, event=e) for e in items_of(item.event)]
        else:
            found.append(item)
    return found


def event_ids(stored: Stored) -> list[str]:
    """The event id of every decodable stored event, duplicates included."""
    return [e.event.event_id for e in stored if isinstance(e, Envelope)]


def lost(acknowledged: Iterable[str], stored: Stored) -> set[str]:
    """Event ids a client was told are stored (ok) that the log does not hold."""
    return set(acknowledged) - set(event_ids(stored))


def once_each(acknowledged: Iterable[str], stored: Stored | Counter[str], where: str = "the log") -> list[str]:
    """Acknowledged event ids not held exactly once (by id, not by count): lost, or stored twice."""
    held = stored if isinstance(stored, Counter) else Counter(event_ids(stored))
    return [f"{i} held {held[i]} times in {where}" for i in sorted(set(acknowledged)) if held[i] != 1]


def encode_command(cmd: commands.RolloutCommand) -> dict[str, str]:
    """A command as the op log keeps it, so a checker can decide it again (event ids derive from its JSON, so
    it must come back byte for byte: floats written as floats)."""
    kept = {"type": type(cmd).__name__, "json": msgspec.json.encode(cmd).decode()}
    assert msgspec.json.encode(decode_command(kept)).decode() == kept["json"], f"{kept} does not round-trip"
    return kept


def decode_command(kept: dict[str, str]) -> commands.RolloutCommand:
    return msgspec.json.decode(kept["json"], type=getattr(commands, kept["type"]))  # type: ignore[no-any-return]


def would_append(cmd: commands.RolloutCommand, history: Sequence[Any]) -> set[str]:
    """The ids of every event ``cmd`` would append at any point of ``history`` (ids derive from the command
    and the state it meets, so had it been applied, one of these sets would be stored)."""
    state, found = decider.initial_state(), set()
    for event in [None, *history]:
        if event is not None:
            state = decider.evolve(state, event)
        try:
            found |= {e.event_id for e in decider.decide(cmd, state)}
        except InvalidCommand:
            continue
    return found


def failed_but_stored(ops: Iterable[dict[str, Any]], stored: Stored) -> list[str]:
    """Operations recorded ``fail`` (certainly not applied) whose events the log holds anyway: the ids the
    op names (``event_ids``/``event_id``), and those its command (``command``) would have appended."""
    ids, found = set(event_ids(stored)), histories(stored)
    violations = []
    for op in ops:
        if op["outcome"] != "fail":
            continue
        args = op["args"]
        candidates = set(args.get("event_ids") or []) | ({args["event_id"]} if args.get("event_id") else set())
        if args.get("command"):
            cmd = decode_command(args["command"])
            candidates |= would_append(cmd, found.get(cmd.rollout_id, []))
        if hit := candidates & ids:
            violations.append(f"{op['process']} {op['op']} {args.get('rollout_id')} failed, yet stored {sorted(hit)}")
    return violations


def rewards_of_succeeded(control: Stored, spans: Stored) -> tuple[dict[tuple[str, str], list[str]], list[str]]:
    """Each succeeded attempt's reward ids in the spans stream (a runner stores its spans before it ends the
    attempt: the success acknowledges them), and the succeeded attempts with none."""
    rewards: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in spans:
        if isinstance(e, Envelope) and isinstance(e.event, RewardReported):
            rewards[(e.event.rollout_id, e.event.attempt_id)].append(e.event.event_id)
    succeeded = [
        (e.event.rollout_id, e.event.attempt_id)
        for e in control
        if isinstance(e, Envelope) and isinstance(e.event, AttemptSucceeded)
    ]
    found = {a: rewards.get(a, []) for a in succeeded}
    return found, [f"{r}/{a} succeeded with no reward stored" for (r, a), ids in found.items() if not ids]


def projected_ids(db: Path, tables: Iterable[str]) -> Counter[str]:
    """How many rows of the named tables of a projection file carry each event id."""
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        rows = [r for t in tables for r in con.execute(f"SELECT event_id FROM {t}").fetchall()]  # noqa: S608 - our names
    return Counter(r[0] for r in rows)


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
