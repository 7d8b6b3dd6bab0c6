"""voltbus addition for runners with many slots: one dispatch fetch claims for many workers at once.

Each slot of a runner is a worker. Polling the queue from every slot costs a fetch per slot per
claim (and one per idle slot per ``dequeue_wait_s``); here one fetch asks for as many rollouts as
there are waiting workers and claims them concurrently, each with its own OCC append, so the claims
share round trips. Every claim, stale entry and worker report is the same as ``dequeue_rollout``'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from voltbus.services.lifecycle import RolloutState

from .base import StoreBase
from .types import AttemptedRollout
from .views import rollout_view

log = logging.getLogger(__name__)


class DispatchMethods(StoreBase):
    """Claiming for several workers with one fetch."""

    async def dequeue_for_workers(
        self, worker_ids: Sequence[str], report_empty: Sequence[str] = ()
    ) -> dict[str, AttemptedRollout]:
        """Claim at most one queued rollout (FIFO) for each worker, in order, with one fetch that waits
        up to ``dequeue_wait_s``; return worker id -> claimed rollout. Each claimant is reported busy,
        as by ``dequeue_rollout``; the workers in ``report_empty`` that got nothing are reported idle
        (an empty dequeue), the others are not reported (a slot that just finished is idle already)."""
        if not worker_ids:
            return {}
        sub = await self._dispatch_subscription()  # type: ignore[attr-defined]
        try:
            msgs = await self._fetch_dispatch(sub, len(worker_ids))  # type: ignore[attr-defined]
        except TimeoutError:  # nats-py raises both its own and asyncio's TimeoutError here
            msgs = []
        pairs = list(zip(worker_ids, msgs, strict=False))  # msgs: at most one per worker
        states = await asyncio.gather(*(self._claim_or_nak(m, w) for w, m in pairs))  # type: ignore[attr-defined]
        claimed: dict[str, RolloutState] = {w: s for (w, _), s in zip(pairs, states, strict=True) if s is not None}
        reports = [self._sync_worker(w, s, dequeued=True) for w, s in claimed.items()]
        reports += [self._sync_worker(w, None, dequeued=True) for w in report_empty if w not in claimed]
        for failure in await asyncio.gather(*reports, return_exceptions=True):
            if isinstance(failure, BaseException):  # a report is not worth losing the claims over
                log.warning("worker report after a claim failed: %s", failure)
        return {w: rollout_view(s) for w, s in claimed.items()}  # type: ignore[misc]
