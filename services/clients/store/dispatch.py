"""Store methods that consume the dispatch queue: claiming queued rollouts (Agent Lightning 0.3's
``dequeue_rollout`` / ``dequeue_many_rollouts``), and a voltbus addition for runners with many slots.

Runners pull from a durable consumer on the rollouts' dispatchable subjects and claim with an OCC
append; a second runner's claim on the same rollout fails and it moves on. Each slot of a runner is a
worker: polling the queue from every slot costs a fetch per slot per claim (and one per idle slot per
``dequeue_wait_s``), so ``dequeue_for_workers`` asks for as many rollouts as there are waiting
workers with one fetch and claims them concurrently, each with its own OCC append.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from voltbus.schemas import codec
from voltbus.schemas.commands import ClaimRollout
from voltbus.schemas.errors import DecodeError, IllegalTransition, VoltbusError
from voltbus.schemas.rollouts import DISPATCHABLE, RolloutQueued
from voltbus.services.lifecycle import RolloutState, decider

from .base import StoreBase, new_id
from .types import AttemptedRollout
from .views import rollout_view

log = logging.getLogger(__name__)


class DispatchMethods(StoreBase):
    """Claiming queued rollouts."""

    _dispatch_sub: JetStreamContext.PullSubscription | None = None
    _spare_dispatch: list[Msg]

    async def dequeue_rollout(self, worker_id: str | None = None) -> AttemptedRollout | None:
        """Claim the oldest queued rollout (FIFO), or None when the queue is empty."""
        claimed = await self.dequeue_many_rollouts(limit=1, worker_id=worker_id)
        return claimed[0] if claimed else None

    async def dequeue_many_rollouts(self, *, limit: int = 1, worker_id: str | None = None) -> list[AttemptedRollout]:
        """Claim up to ``limit`` queued rollouts in FIFO order; stale queue entries are skipped."""
        if limit <= 0:
            return []
        sub = await self._dispatch_subscription()
        claimed: list[AttemptedRollout] = []
        latest: RolloutState | None = None
        while len(claimed) < limit:
            try:
                msgs = await self._fetch_dispatch(sub, limit - len(claimed))
            except TimeoutError:  # nats-py raises both its own and asyncio's TimeoutError here
                break
            if not msgs:
                break
            for msg in msgs:
                state = await self._claim_or_nak(msg, worker_id)
                if state is not None:
                    claimed.append(rollout_view(state))  # type: ignore[arg-type]
                    latest = state
        await self._sync_worker(worker_id, latest, dequeued=True)
        return claimed

    async def _dispatch_subscription(self) -> JetStreamContext.PullSubscription:
        if self._dispatch_sub is None:
            await self._ensure_group_consumer(self.runner_group)
            self._dispatch_sub = await self.log.js.pull_subscribe_bind(
                self.topology.group_dispatch_consumer(self.runner_group), self.topology.control_stream
            )
        return self._dispatch_sub

    async def _fetch_dispatch(self, sub: JetStreamContext.PullSubscription, n: int) -> list[Msg]:
        """At most ``n`` dispatch messages. nats-py's fetch also hands over every message left from an
        earlier request, even past ``n``: the extra ones are kept for the next call, which takes them
        first (left unclaimed, they would wait out the consumer's ack wait; a nak would count as a
        delivery against ``dispatch_max_deliver``)."""
        if not self._spare_dispatch:
            self._spare_dispatch = await sub.fetch(n, timeout=self.settings.dequeue_wait_s)
        msgs, self._spare_dispatch = self._spare_dispatch[:n], self._spare_dispatch[n:]
        return msgs

    async def _claim_or_nak(self, msg: Msg, worker_id: str | None, start: bool = False) -> RolloutState | None:
        """``_claim``; when it fails, the message is redelivered (after a second) and None returned."""
        try:
            return await self._claim(msg, worker_id, start)
        except (VoltbusError, TimeoutError) as exc:  # keep the claims already made; redeliver this one
            log.warning("claim of %s failed: %s", msg.subject, exc)
            await msg.nak(delay=1)
            return None

    async def _claim(self, msg: Msg, worker_id: str | None, start: bool = False) -> RolloutState | None:
        """Claim one dispatch message's rollout: an OCC append; a stale or lost claim just moves on.
        ``start``: the attempt opens running (see ``ClaimRollout.start``)."""
        try:
            event = codec.decode_control(msg.data)
        except DecodeError as exc:
            log.error("undecodable dispatch message on %s: %s", msg.subject, exc)
            await msg.nak()  # after max deliveries the coordinator parks the rollout with the reason
            return None
        if not isinstance(event, DISPATCHABLE):
            await msg.term()
            return None
        if isinstance(event, RolloutQueued) and event.rollout_id not in self._known_rollouts:
            # a rollout's first event: its state is known without a read (a later event is an OCC conflict)
            self._remember(
                event.rollout_id, decider.evolve(decider.initial_state(), event), msg.metadata.sequence.stream
            )
        cmd = ClaimRollout(
            rollout_id=event.rollout_id,
            attempt_id=new_id("at", 8),
            dispatch_event_id=event.event_id,
            worker_id=worker_id,
            at=self.clock(),
            start=start,
            runner_group=self.runner_group,
        )
        try:
            state = await self._apply(event.rollout_id, cmd)
        except IllegalTransition:
            await msg.ack()  # the entry is stale (cancelled, claimed by someone else) or another group's
            return None
        await msg.ack()
        return state

    async def dequeue_for_workers(
        self,
        worker_ids: Sequence[str],
        report_empty: Sequence[str] = (),
        start: bool = False,
        report_claims: bool = True,
    ) -> dict[str, AttemptedRollout]:
        """Claim at most one queued rollout (FIFO) for each worker, in order, with one fetch that waits
        up to ``dequeue_wait_s``; return worker id -> claimed rollout. Each claimant is reported busy,
        as by ``dequeue_rollout``; the workers in ``report_empty`` that got nothing are reported idle
        (an empty dequeue), the others are not reported (a slot that just finished is idle already).
        ``start``: the workers start their agents at once, so each attempt opens ``running`` with its
        claim (one append per rollout fewer than claiming, then marking it running). ``report_claims``
        False: the claimants are not reported busy here (a runner reports the attempts that outlive
        ``busy_report_s`` with ``report_worker_busy``)."""
        if not worker_ids:
            return {}
        sub = await self._dispatch_subscription()
        try:
            msgs = await self._fetch_dispatch(sub, len(worker_ids))
        except TimeoutError:  # nats-py raises both its own and asyncio's TimeoutError here
            msgs = []
        pairs = list(zip(worker_ids, msgs, strict=False))  # msgs: at most one per worker
        states = await asyncio.gather(*(self._claim_or_nak(m, w, start) for w, m in pairs))
        claimed: dict[str, RolloutState] = {w: s for (w, _), s in zip(pairs, states, strict=True) if s is not None}
        reports = [self._sync_worker(w, s, dequeued=True) for w, s in claimed.items() if report_claims]
        reports += [self._sync_worker(w, None, dequeued=True) for w in report_empty if w not in claimed]
        for failure in await asyncio.gather(*reports, return_exceptions=True):
            if isinstance(failure, BaseException):  # a report is not worth losing the claims over
                log.warning("worker report after a claim failed: %s", failure)
        return {w: rollout_view(s) for w, s in claimed.items()}  # type: ignore[misc]
