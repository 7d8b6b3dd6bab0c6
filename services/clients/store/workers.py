"""Store methods for workers: each report is a full snapshot on the worker's subject, appended with OCC.

Worker status follows its attempts as in Agent Lightning 0.3: busy while one runs, idle after it
succeeds or fails, unknown after a timeout or unresponsiveness. Empty dequeues only write when the
status changes, so an idle runner polling the queue does not flood the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from msgspec import UNSET
from msgspec.structs import replace
from nats.js.errors import NotFoundError

from voltbus.schemas import codec
from voltbus.schemas.base import derive_id
from voltbus.schemas.errors import ConcurrencyConflict, PermissionDenied
from voltbus.schemas.workers import HeartbeatStats, WorkerStatusReported
from voltbus.services.lifecycle import RolloutState
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from .base import StoreBase
from .types import Worker
from .views import worker_view

log = logging.getLogger(__name__)


class WorkerMethods(StoreBase):
    """Worker registration, heartbeats and status."""

    _known_workers: dict[str, tuple[WorkerStatusReported, int]]
    _worker_locks: dict[str, asyncio.Lock]

    async def _last_report(self, worker_id: str) -> tuple[WorkerStatusReported | None, int]:
        subject = self.topology.worker(worker_id)
        try:
            raw = await self.log.js.get_last_msg(self.topology.control_stream, subject, direct=True)
        except NotFoundError:
            return None, 0
        report = codec.decode_control(raw.data or b"")
        assert isinstance(report, WorkerStatusReported)
        return report, raw.seq

    async def _report(
        self,
        worker_id: str,
        change: Callable[[WorkerStatusReported, float], WorkerStatusReported | None],
        recheck: bool = True,
    ) -> WorkerStatusReported:
        """Apply ``change`` to the worker's last snapshot and append it with OCC; re-read and retry if
        another report won. The snapshot this client wrote last is reused, saving a read per report;
        with ``recheck``, "nothing to write" judged on it is confirmed on the stored one. Reports of one
        worker by this client go one at a time (concurrent ones would race each other into conflicts)."""
        lock = self._worker_locks.get(worker_id)
        if lock is None:
            if len(self._worker_locks) >= 4096:  # forget idle locks of workers no longer reported
                self._worker_locks = {w: k for w, k in self._worker_locks.items() if k.locked()}
            lock = self._worker_locks[worker_id] = asyncio.Lock()
        async with lock:
            return await self._report_now(worker_id, change, recheck)

    async def _report_now(
        self,
        worker_id: str,
        change: Callable[[WorkerStatusReported, float], WorkerStatusReported | None],
        recheck: bool,
    ) -> WorkerStatusReported:
        known = self._known_workers.pop(worker_id, None)
        for _ in range(self.settings.conflict_retries + 2):
            cached = known is not None
            last, seq = known if known is not None else await self._last_report(worker_id)
            known = None
            now = self.clock()
            base = last or WorkerStatusReported(event_id="new", worker_id=worker_id, at=now)
            new = change(base, now)
            if new is None:
                if cached and recheck:  # "nothing to write" judged on a remembered snapshot: check the real one
                    continue
                if last is not None:
                    self._known_workers[worker_id] = (last, seq)
                return base
            event = replace(new, at=now, event_id=derive_id(worker_id, "report", seq, repr(now)))
            try:
                ack = await self.log.append([event], expected_seq=seq)
            except ConcurrencyConflict:
                continue
            self._known_workers[worker_id] = (event, ack.seq)
            return event
        raise ConcurrencyConflict(self.topology.worker(worker_id), seq, None)

    async def update_worker(self, worker_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        """Record a heartbeat (and its host stats); never changes the worker's status."""
        stats = None if heartbeat_stats is UNSET else HeartbeatStats.of(heartbeat_stats)

        def beat(w: WorkerStatusReported, now: float) -> WorkerStatusReported:
            return replace(w, last_heartbeat_time=now, heartbeat_stats=stats or w.heartbeat_stats)

        return worker_view(await self._report(worker_id, beat))

    async def start_worker_session(self, worker_id: str, session_id: str, heartbeat_stats: Any = UNSET) -> Worker:
        """voltbus addition (the runner's, at its start): open a new session on the worker, idle and beating."""
        stats = None if heartbeat_stats is UNSET else HeartbeatStats.of(heartbeat_stats)

        def open_session(w: WorkerStatusReported, now: float) -> WorkerStatusReported:
            return replace(
                w,
                session_id=session_id,
                status="idle",
                current_rollout_id=None,
                current_attempt_id=None,
                last_heartbeat_time=now,
                last_idle_time=now,
                heartbeat_stats=stats or w.heartbeat_stats,
            )

        return worker_view(await self._report(worker_id, open_session))

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        """The worker's latest snapshot, or None when it never reported."""
        last, _ = await self._last_report(worker_id)
        return worker_view(last) if last else None

    async def _sync_worker(self, worker_id: str | None, state: RolloutState | None, dequeued: bool = False) -> None:
        """Make the worker's status follow its latest attempt (or go idle after an empty dequeue)."""
        if not worker_id:
            return

        def follow(w: WorkerStatusReported, now: float) -> WorkerStatusReported | None:
            return _follow(w, now, worker_id, state, dequeued)

        # "Already busy with this attempt" need not be confirmed on the stored snapshot: only this
        # attempt's claimant reports it busy, and anyone else changes that only by ending the attempt
        # (which made this transition illegal). Idle and unknown are confirmed: other clients write them.
        latest = state.latest if state else None
        active = latest is not None and latest.worker_id in (None, worker_id) and latest.status in ACTIVE_ATTEMPT
        try:
            await self._report(worker_id, follow, recheck=dequeued or not active)
        except PermissionDenied:  # e.g. the learner cancelling a claimed rollout: the worker's runner reports it
            log.info("worker %s: status left to its runner (this bus user may not publish worker status)", worker_id)

    async def report_worker_busy(self, worker_id: str, rollout_id: str) -> None:
        """voltbus addition (the runner's): report ``worker_id`` busy with the rollout's attempt, if that
        attempt still runs under it as this client last wrote it. A runner calls this once an attempt
        outlives ``busy_report_s``; an attempt that ended meanwhile (its end is this client's own write,
        made one report at a time with this one) leaves the status as its end set it."""

        def busy(w: WorkerStatusReported, now: float) -> WorkerStatusReported | None:
            known = self._known_rollouts.get(rollout_id)  # read under the worker's lock: after any end
            latest = known[0].latest if known else None
            if latest is None or latest.worker_id != worker_id or latest.status not in ACTIVE_ATTEMPT:
                return None  # ended (a terminal state is not kept), or not this worker's
            return _follow(w, now, worker_id, known[0], False)  # type: ignore[index]

        await self._report(worker_id, busy, recheck=False)


def _follow(
    w: WorkerStatusReported, now: float, worker_id: str, state: RolloutState | None, dequeued: bool
) -> WorkerStatusReported | None:
    """The worker's snapshot once it follows ``state``'s latest attempt; None when there is nothing new."""
    seen = {"last_dequeue_time": now} if dequeued else {}
    attempt = state.latest if state else None
    if attempt is None or attempt.worker_id not in (None, worker_id):
        if w.status == "idle" and dequeued and w.last_dequeue_time is not None:
            return None  # an idle worker polling again: nothing new worth a durable write
        return replace(w, status="idle", last_idle_time=now, current_rollout_id=None, current_attempt_id=None, **seen)
    if attempt.status in ACTIVE_ATTEMPT:
        if w.status == "busy" and w.current_attempt_id == attempt.attempt_id and not dequeued:
            return None  # already reported
        return replace(
            w,
            status="busy",
            last_busy_time=now,
            current_rollout_id=state.rollout_id,  # type: ignore[union-attr]
            current_attempt_id=attempt.attempt_id,
            **seen,
        )
    status = "idle" if attempt.status in ("succeeded", "failed") else "unknown"
    if w.status == status and w.current_attempt_id is None and not dequeued:
        return None  # already reported
    return replace(w, status=status, last_idle_time=now, current_rollout_id=None, current_attempt_id=None, **seen)
