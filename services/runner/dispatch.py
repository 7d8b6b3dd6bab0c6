"""The runner's dispatcher: the slots waiting for work are served by one fetch loop.

A waiting slot costs nothing on the bus: the loop asks the queue for as many rollouts as slots wait
(``Store.dequeue_for_workers``), claims them concurrently and hands each to its slot. A slot's first
wait reports its worker idle when nothing came (an empty dequeue, as in Agent Lightning); after that
the end of each attempt reports it idle.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors

from voltbus.schemas.errors import VoltbusError
from voltbus.schemas.rollouts import ErrorInfo
from voltbus.services.clients.store import AttemptedRollout, Store
from voltbus.services.restart import cancelled

log = logging.getLogger(__name__)

RETRY_S = 0.5
"""Pause after a failed round (a bus error that repeats at once would otherwise spin)."""


class Dispatcher:
    """Claims rollouts for the slots that wait, with one fetch per round."""

    def __init__(self, store: Store, report_claims: bool = True) -> None:
        self.store = store
        self.report_claims = report_claims
        """Report each claimant busy at its claim (else the runner reports the attempts that run long)."""
        self.waiting: dict[str, asyncio.Future[AttemptedRollout | None]] = {}
        self.reported: set[str] = set()
        self.wake = asyncio.Event()
        self.failed: BaseException | None = None
        """What ended the dispatcher, if not ``stop``: every claim raises it (the slots end, as the runner)."""

    async def claim(self, worker_id: str) -> AttemptedRollout | None:
        """The next rollout claimed for this worker; None once the dispatcher stopped."""
        if self.failed is not None:
            raise self.failed
        fut: asyncio.Future[AttemptedRollout | None] = asyncio.get_running_loop().create_future()
        self.waiting[worker_id] = fut
        self.wake.set()
        try:
            return await fut
        finally:
            if self.waiting.get(worker_id) is fut:
                del self.waiting[worker_id]

    async def run(self, stop: asyncio.Event) -> None:
        """Serve waiting slots until ``stop``; the round in progress then ends, and every slot still
        waiting gets None."""
        stopping = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                if not self.waiting:
                    woken = asyncio.create_task(self.wake.wait())
                    await asyncio.wait([woken, stopping], return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
                    continue
                await self.round()
        except Exception as exc:  # e.g. the connection closed for good
            self.failed = exc
            raise
        finally:
            stopping.cancel()
            for fut in self.waiting.values():
                if not fut.done():
                    if self.failed is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(self.failed)

    async def round(self) -> None:
        """One fetch for the slots waiting now; each claimed rollout goes to its slot."""
        self.wake.clear()
        workers = [w for w, fut in self.waiting.items() if not fut.done()]
        if not workers:  # only slots about to resume: let them run instead of spinning here
            await asyncio.sleep(0)
            return
        first = [w for w in workers if w not in self.reported]
        try:
            got = await self.store.dequeue_for_workers(
                workers, report_empty=first, start=True, report_claims=self.report_claims
            )
        except (VoltbusError, TimeoutError, nats.errors.Error) as exc:
            if isinstance(exc, nats.errors.ConnectionClosedError) or cancelled():
                raise  # for good: every slot ends with it (or a cancel turned into this error)
            # JetStream's 503 or no responders while a server restarts, a timeout: the bus comes back
            log.warning("dispatch round failed (retrying in %ss): %s: %s", RETRY_S, type(exc).__name__, exc)
            await asyncio.sleep(RETRY_S)  # a pause before the retry, not a synchronization
            return
        self.reported.update(first)
        for worker_id, rollout in got.items():
            fut = self.waiting.pop(worker_id, None)
            if fut is not None and not fut.done():
                fut.set_result(rollout)
            else:  # its slot is gone (cancelled): end the attempt now rather than wait for the coordinator
                await self._release(rollout)

    async def _release(self, rollout: AttemptedRollout) -> None:
        error = ErrorInfo(type="Cancelled", message="the runner stopped before the rollout started")
        try:
            await self.store.finish_attempt(rollout.rollout_id, rollout.attempt.attempt_id, error)
        except VoltbusError as exc:
            log.warning("rollout_id=%s: claimed but not released: %s", rollout.rollout_id, exc)
