"""What every part of the store client shares: the event log, the clock, id generation."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from voltbus.schemas.commands import RolloutCommand
from voltbus.schemas.errors import UnknownRollout
from voltbus.services.eventlog import EventLog, ensure_consumer, group_dispatch_config
from voltbus.services.lifecycle import RolloutState, decider
from voltbus.services.lifecycle.authority import Holder
from voltbus.services.lifecycle.signing import SigningDecider
from voltbus.services.settings import NatsSettings

from .finished import FinishedSpans

ID_EPOCH = 1735689600.0
"""2025-01-01 UTC: ids count milliseconds from here, in ``TIME_HEX`` hex digits (40 bits: until 2059)."""
TIME_HEX = 10
_LAST: dict[str, tuple[int, int]] = {}
"""The last id made in this process, per prefix: its milliseconds and random part."""
_LOCK = threading.Lock()


def new_id(prefix: str, random_hex: int, now: float | None = None) -> str:
    """A new id in Agent Lightning's shape (``ro-`` and hex digits) that sorts by creation time: the milliseconds
    since ``ID_EPOCH`` in ``TIME_HEX`` hex digits, then ``random_hex`` random ones. Within a process the ids of a
    prefix only grow: a second id in the same millisecond (or after the clock stepped back) counts on from the last.

    Time-ordered keys keep the projection's indexes local: new keys land at one end of each index, so a DuckDB
    checkpoint rewrites a few of its blocks instead of nearly all of them (random keys dirty the whole tree), and
    shared prefixes make the index smaller (docs/projections.md, "Ids that sort by time"). ``now``: make the id of
    that instant, outside the process's sequence.

    >>> a, b = new_id("ro", 10, now=ID_EPOCH + 1.5), new_id("ro", 10, now=ID_EPOCH + 2.5)
    >>> a[:13], len(a), a < b
    ('ro-00000005dc', 23, True)
    """
    if now is not None:
        return _shape(prefix, _millis(now), secrets.randbits(4 * random_hex), random_hex)
    with _LOCK:
        millis, last = _millis(time.time()), _LAST.get(prefix)
        if last is not None and millis <= last[0] and last[1] + 1 < 16**random_hex:
            millis, rand = last[0], last[1] + 1
        else:  # the top bit clear: counting on within a millisecond cannot run out of digits
            rand = secrets.randbits(4 * random_hex - 1)
        _LAST[prefix] = (millis, rand)
    return _shape(prefix, millis, rand, random_hex)


def _millis(at: float) -> int:
    return int((at - ID_EPOCH) * 1000) % 16**TIME_HEX


def _shape(prefix: str, millis: int, rand: int, random_hex: int) -> str:
    return f"{prefix}-{millis:0{TIME_HEX}x}{rand:0{random_hex}x}"


class StoreBase:
    """The connection and helpers the store's method groups build on."""

    def __init__(self, log: EventLog, clock: Callable[[], float] = time.time) -> None:
        self.log = log
        self.settings: NatsSettings = log.settings
        self.topology = log.topology
        self.clock = clock
        self._pinned_resources: dict[str, Any] = {}
        """Resources versions read by pinned id (immutable, so kept); see ``get_resources_by_id``."""
        self._known_rollouts: dict[str, tuple[RolloutState, int]] = {}
        """rollout id -> (state, sequence) this client last wrote or saw; only a guess for OCC."""
        self.holder = Holder()
        """This client's signing key (in memory only): the attempts it claims only it may start, end or update."""
        self._decider = SigningDecider(self.holder)
        self.runner_group = ""
        """The runner group this client claims for and enqueues into (``RolloutConfig.runner_group``): a
        ``Trainer`` run's own; ``""``: the default group."""
        self._groups_ready: set[str] = set()
        self._outcomes: dict[str, str] = {}
        self._finished_states: dict[str, tuple[RolloutState, int]] = {}
        self._in_flight: dict[str, None] = {}  # (waits.py: unfinished rollouts read before, in the order read)
        """Rollouts seen finished: (state, last sequence), oldest first (``waits.py``)."""
        self.finished = FinishedSpans()
        """Rollouts seen finished, whose spans a query fetches together (``finished.py``)."""
        self.seen: dict[str, int] = {}
        """Stream positions every query waits for besides this client's writes: the end of each rollout this
        client has seen finished, and the spans acknowledged before it (see ``saw_ended``)."""

    async def _ensure_group_consumer(self, group: str) -> None:
        """A runner group's own dispatch consumer exists (made by its first enqueue or claim: from then on it
        holds every dispatchable message); the default group's (``""``) is made with the streams."""
        if group and group not in self._groups_ready:
            wanted = group_dispatch_config(self.settings, group)
            await ensure_consumer(self.log.js, self.topology.control_stream, wanted)
            self._groups_ready.add(group)

    async def saw_ended(self, seq: int, rollout_ids: list[str]) -> None:
        """Note that a read reported a rollout finished by control sequence ``seq``: from now on a query waits until the
        projector has applied it and every span stored by then. A runner acknowledges an attempt's spans before it
        ends the attempt, so they all sit at or before the spans stream's last sequence read after the end was seen
        (Agent Lightning's pattern: wait for rollouts, then query their spans). One request, only for an end past
        what was noted before."""
        self.finished.saw(rollout_ids)
        if seq <= self.seen.get("control", 0):
            return
        spans = (await self.log.js.stream_info(self.topology.spans_stream)).state.last_seq
        self.seen["spans"] = max(self.seen.get("spans", 0), spans)
        self.seen["control"] = max(self.seen.get("control", 0), seq)

    def floors(self) -> dict[str, int]:
        """What a query waits for: this client's writes and the ends it has seen (``saw_ended``)."""
        floors = {s: n for s, n in self.log.written.items() if n}
        for stream, n in self.seen.items():
            floors[stream] = max(floors.get(stream, 0), n)
        return floors

    def sign_as(self, holder: Holder) -> None:
        """Claim and sign with ``holder`` from now on (a runner with fixed worker ids keeps its key in a file)."""
        self.holder, self._decider = holder, SigningDecider(holder)

    async def _state(self, rollout_id: str) -> RolloutState:
        """A rollout's current state; UnknownRollout if it does not exist."""
        return (await self._state_at(rollout_id))[0]

    async def _state_at(self, rollout_id: str) -> tuple[RolloutState, int]:
        """A rollout's current state and last sequence; UnknownRollout if it does not exist."""
        state, seq = await self.log.load(decider, rollout_id)
        if state.status is None:
            raise UnknownRollout(rollout_id)
        return state, seq

    async def _apply(self, rollout_id: str, command: RolloutCommand) -> RolloutState:
        """Run one command through the lifecycle decider; return the state after it. The state this
        client last wrote or saw for the rollout, when it has one, is tried first (``transact``'s
        ``known``), saving the read of the rollout's history."""
        known = self._known_rollouts.pop(rollout_id, None)
        result = await self.log.transact(self._decider, rollout_id, command, known=known)
        self._remember(rollout_id, result.state, result.seq)
        return result.state

    def attempt_outcome(self, rollout_id: str) -> str | None:
        """How the rollout's latest attempt stands as this client last wrote or saw it (no I/O): its status and, when
        it failed, the error's type; None when unknown. Read once (a runner's log line of each attempt's end)."""
        return self._outcomes.pop(rollout_id, None)

    def _remember(self, rollout_id: str, state: RolloutState, seq: int) -> None:
        """Keep a rollout's state as an OCC guess (not for ended rollouts; at most 4,096 kept)."""
        if (latest := state.latest) is not None:
            if len(self._outcomes) >= 4096:
                self._outcomes.pop(next(iter(self._outcomes)))
            self._outcomes[rollout_id] = latest.status + (f" ({latest.error.type})" if latest.error else "")
        if seq <= 0 or decider.is_terminal(state):
            self._known_rollouts.pop(rollout_id, None)
            return
        if len(self._known_rollouts) >= 4096:
            self._known_rollouts.pop(next(iter(self._known_rollouts)))
        self._known_rollouts[rollout_id] = (state, seq)

    async def _latest_resources_id(self) -> str | None:
        raise NotImplementedError  # ResourceMethods provides it

    async def _sync_worker(self, worker_id: str | None, state: RolloutState | None, dequeued: bool = False) -> None:
        raise NotImplementedError  # WorkerMethods provides it
