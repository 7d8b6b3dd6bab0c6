"""``wait_for_rollouts``: woken by the rollouts' own stored events, never by a polling loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import RolloutState, decider

from .base import StoreBase
from .types import Rollout
from .views import rollout_view


class WaitMethods(StoreBase):
    """Waiting for rollouts to finish."""

    async def wait_for_rollouts(self, *, rollout_ids: Sequence[str], timeout: float | None = None) -> list[Rollout]:
        """The rollouts that are finished, or finish before ``timeout``, in the order asked.

        ``timeout`` None waits until all finish; 0 or less only checks. Unknown ids raise UnknownRollout.
        """
        wanted = list(dict.fromkeys(rollout_ids))
        # note the stream position before reading, then follow the log from there: nothing is missed
        start = (await self.log.js.stream_info(self.topology.control_stream)).state.last_seq
        done = {rid: state for rid in wanted if decider.is_terminal(state := await self._state(rid))}
        if len(done) < len(wanted) and (timeout is None or timeout > 0):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._follow_until_done(wanted, done, start)
        return [rollout_view(done[rid]) for rid in wanted if rid in done]

    async def _follow_until_done(self, wanted: list[str], done: dict[str, RolloutState], start: int) -> None:
        pending = set(wanted) - set(done)
        replay = self.log.replay("control", from_seq=start + 1, follow=True, subject=self.topology.every_rollout)
        try:
            async for item in replay:
                rid = item.subject.split(".")[2]
                if (
                    rid in pending
                    and isinstance(item, Envelope)
                    and decider.is_terminal(state := await self._state(rid))
                ):
                    done[rid] = state
                    pending.discard(rid)
                    if not pending:
                        return
        finally:
            await replay.aclose()  # type: ignore[attr-defined]
