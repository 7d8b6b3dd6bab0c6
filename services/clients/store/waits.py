"""``wait_for_rollouts``: woken by the rollouts' own stored events, never by a polling loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import RolloutState, decider

from .coldwave import ProjectedStates
from .types import Rollout
from .views import rollout_view

LOADS_AT_ONCE = 32
"""Rollouts read at once by one ``wait_for_rollouts`` (one direct get each, pipelined on the connection)."""
FINISHED_KEPT = 4096
"""Finished rollouts whose state a client keeps, to check only their last sequence when asked again."""
IN_FLIGHT_KEPT = 65_536
"""Unfinished rollouts a client remembers having read: it reads them from the log when asked again (an algorithm
polls its rollouts in flight; the projection answers only the first look at each, the cold ones)."""


class WaitMethods(ProjectedStates):
    """Waiting for rollouts to finish."""

    _finished_states: dict[str, tuple[RolloutState, int]]
    _in_flight: dict[str, None]

    async def wait_for_rollouts(self, *, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        """The rollouts that are finished, or finish before ``timeout``, in the order asked.

        ``timeout`` None waits until all finish; 0 or less only checks. Unknown ids raise UnknownRollout. A query
        made after this returns sees the returned rollouts' final state and spans (``saw_ended``).
        """
        wanted = list(dict.fromkeys(rollout_ids))
        follow = timeout is None or timeout > 0
        # note the stream position before reading, then follow the log from there: nothing is missed
        start = (await self.log.js.stream_info(self.topology.control_stream)).state.last_seq if follow else 0
        done: dict[str, RolloutState] = {}
        last = 0
        for rid, (state, seq) in zip(wanted, await self._states_at(wanted), strict=True):
            if decider.is_terminal(state):
                done[rid], last = state, max(last, seq)
        if len(done) < len(wanted) and follow:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    last = max(last, await self._follow_until_done(wanted, done, start))
        if last:
            await self.saw_ended(last, list(done))
        return [rollout_view(done[rid]) for rid in wanted if rid in done]

    async def _states_at(self, rollout_ids: list[str]) -> list[tuple[RolloutState, int]]:
        """The current state and last sequence of each rollout, read ``LOADS_AT_ONCE`` at a time (an algorithm polls
        a whole batch). A rollout this client saw finished is folded again only when its last sequence moved; the
        others are first looked up in the projection, all in one query (``coldwave.py``), and read from the log when
        it cannot answer them exactly."""
        gate = asyncio.Semaphore(LOADS_AT_ONCE)
        hot = self._in_flight
        projected = await self._projected_states(
            [rid for rid in rollout_ids if rid not in self._finished_states and rid not in hot]
        )

        async def one(rid: str) -> tuple[RolloutState, int]:
            if rid in projected:
                state, seq = projected[rid]
            else:
                async with gate:
                    seen = self._finished_states.get(rid)
                    if seen is not None and await self.log.head(rid) == seen[1]:
                        return seen
                    state, seq = await self._state_at(rid)
            if decider.is_terminal(state):
                hot.pop(rid, None)
                self._finished_states[rid] = (state, seq)
                while len(self._finished_states) > FINISHED_KEPT:
                    self._finished_states.pop(next(iter(self._finished_states)))
            else:  # polled again soon, while its events arrive: read from the log, whose end is in memory
                hot[rid] = None
                while len(hot) > IN_FLIGHT_KEPT:
                    hot.pop(next(iter(hot)))
            return state, seq

        return list(await asyncio.gather(*(one(rid) for rid in rollout_ids)))

    async def _follow_until_done(self, wanted: list[str], done: dict[str, RolloutState], start: int) -> int:
        """Follow the rollouts' events until all are finished; the sequence of the last end seen."""
        pending, last = set(wanted) - set(done), 0
        replay = self.log.replay("control", from_seq=start + 1, follow=True, subject=self.topology.every_rollout)
        try:
            async for item in replay:
                rid = item.subject.split(".")[2]
                if rid not in pending or not isinstance(item, Envelope):
                    continue
                state, seq = await self._state_at(rid)
                if decider.is_terminal(state):
                    done[rid], last = state, max(last, seq)
                    pending.discard(rid)
                    if not pending:
                        return last
        finally:
            await replay.aclose()  # type: ignore[attr-defined]
        return last
