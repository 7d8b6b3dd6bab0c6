"""``wait_for_rollouts``: woken by the rollouts' own events on the bus, never by a polling loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from nats.aio.msg import Msg

from voltbus.services.lifecycle import decider

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
        changed = asyncio.Event()
        touched: set[str] = set()

        async def on_event(msg: Msg) -> None:
            touched.add(msg.subject.split(".")[2])
            changed.set()

        # subscribe before reading, so an event between the read and the wait is not missed
        sub = await self.log.nc.subscribe(f"{self.topology.namespace}.ro.*.e", cb=on_event)
        try:
            done = {rid: state for rid in wanted if decider.is_terminal(state := await self._state(rid))}
            deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
            while len(done) < len(wanted):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    break
                changed.clear()
                batch, touched_now = set(touched), touched
                touched_now.clear()
                for rid in batch & (set(wanted) - set(done)):
                    if decider.is_terminal(state := await self._state(rid)):
                        done[rid] = state
        finally:
            await sub.unsubscribe()
        return [rollout_view(done[rid]) for rid in wanted if rid in done]
