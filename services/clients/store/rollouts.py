"""Store methods for rollouts and attempts: create, claim, update, read (Agent Lightning 0.3's names)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from voltbus.schemas.base import derive_id
from voltbus.schemas.commands import (
    CancelRollout,
    ExpireAttempt,
    FinishAttempt,
    MarkAttemptRunning,
    ParkRollout,
    QueueRollout,
    StartAttempt,
    StartRollout,
    UpdateAttempt,
    UpdateRollout,
)
from voltbus.schemas.errors import (
    ConcurrencyConflict,
    IllegalTransition,
    InvalidCommand,
    UnknownAttempt,
)
from voltbus.schemas.rollouts import ErrorInfo, RolloutConfig
from voltbus.schemas.spans import AttemptHeartbeatSent
from voltbus.schemas.subjects import check_token
from voltbus.services.lifecycle import RolloutState, decider
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

from .base import StoreBase, new_id
from .types import Attempt, AttemptedRollout, EnqueueRolloutRequest, Rollout
from .views import attempt_view, metadata_json, rollout_config, rollout_view, to_json

log = logging.getLogger(__name__)


def chosen_id(rollout_id: str) -> str:
    """A caller's rollout id, checked: a subject token not starting with ``_`` (the bus counters' own names).

    >>> chosen_id("0f3a9c")
    '0f3a9c'
    >>> chosen_id("_workers")
    Traceback (most recent call last):
    ...
    voltbus.schemas.errors.InvalidCommand: rollout id '_workers': ids starting with '_' are reserved
    """
    if rollout_id.startswith("_"):
        raise InvalidCommand(f"rollout id {rollout_id!r}: ids starting with '_' are reserved")
    return check_token("rollout id", rollout_id)


class RolloutMethods(StoreBase):
    """Rollout and attempt lifecycle through the log."""

    async def _queue_command(
        self,
        input: Any,
        mode: str | None,
        resources_id: str | None,
        config: RolloutConfig | None,
        metadata: dict[str, Any] | None,
        latest: str | None,
        rollout_id: str | None = None,
    ) -> QueueRollout:
        checked = rollout_config(config)
        if self.runner_group and not checked.runner_group:  # this client's group, unless the config names one
            checked = msgspec.structs.replace(checked, runner_group=self.runner_group)
        if checked.runner_group:  # made before the rollout is queued, so the group's consumer holds it
            await self._ensure_group_consumer(checked.runner_group)
        return QueueRollout(
            rollout_id=chosen_id(rollout_id) if rollout_id else new_id("ro", 10),
            input=to_json(input, "rollout input"),
            mode=mode,  # type: ignore[arg-type]
            resources_id=resources_id or latest,
            config=checked,
            metadata=metadata_json(metadata),
            at=self.clock(),
        )

    async def enqueue_rollout(
        self,
        input: Any,
        mode: str | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
        rollout_id: str | None = None,
    ) -> Rollout:
        """Create a rollout in the queue (status ``queuing``); resources default to the latest. voltbus addition:
        ``rollout_id`` chooses its id (a subject token; ConcurrencyConflict when a rollout has it already)."""
        latest = await self._latest_resources_id() if resources_id is None else None
        cmd = await self._queue_command(input, mode, resources_id, config, metadata, latest, rollout_id)
        # a fresh id: decide against the empty state and append "must be first", no read needed
        events = decider.decide(cmd, decider.initial_state())
        await self.log.append(events, expected_seq=0)
        return rollout_view(decider.evolve(decider.initial_state(), events[0]))  # type: ignore[arg-type]

    async def enqueue_many_rollouts(self, requests: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        """Create many queued rollouts in one pipelined write, in input order."""
        latest = await self._latest_resources_id()
        cmds = [
            await self._queue_command(r.input, r.mode, r.resources_id, r.config, r.metadata, latest) for r in requests
        ]
        events = [decider.decide(c, decider.initial_state())[0] for c in cmds]
        results = await self.log.append_many(events, expected_seq=0)
        for r in results:
            if isinstance(r, ConcurrencyConflict):
                raise r
        return [rollout_view(decider.evolve(decider.initial_state(), e)) for e in events]  # type: ignore[arg-type]

    async def start_rollout(
        self,
        input: Any,
        mode: str | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> AttemptedRollout:
        """Create a rollout with attempt 1 already ``preparing``, bypassing the queue."""
        latest = await self._latest_resources_id() if resources_id is None else None
        cmd = StartRollout(
            rollout_id=new_id("ro", 10),
            attempt_id=new_id("at", 8),
            input=to_json(input, "rollout input"),
            mode=mode,
            resources_id=resources_id or latest,  # type: ignore[arg-type]
            config=rollout_config(config),
            metadata=metadata_json(metadata),
            worker_id=worker_id,
            at=self.clock(),
        )
        state = await self._apply(cmd.rollout_id, cmd)
        await self._sync_worker(worker_id, state)
        return rollout_view(state)  # type: ignore[return-value]

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Open the next attempt directly (does not consume the queue; ignores max_attempts)."""
        cmd = StartAttempt(rollout_id=rollout_id, attempt_id=new_id("at", 8), worker_id=worker_id, at=self.clock())
        state = await self._apply(rollout_id, cmd)
        await self._sync_worker(worker_id, state)
        return rollout_view(state)  # type: ignore[return-value]

    async def update_rollout(
        self,
        rollout_id: str,
        input: Any = UNSET,
        mode: Any = UNSET,
        resources_id: Any = UNSET,
        status: Any = UNSET,
        config: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Rollout:
        """Change a rollout's fields, or its status through the lifecycle's legal transitions."""
        if input is not UNSET:
            raise InvalidCommand(f"rollout {rollout_id!r}: input is immutable once enqueued")
        now = self.clock()
        if any(v is not UNSET for v in (mode, resources_id, config, metadata)):
            meta = UNSET if metadata is UNSET else metadata_json(metadata)
            checked = UNSET if config is UNSET else rollout_config(config)
            await self._apply(
                rollout_id,
                UpdateRollout(
                    rollout_id=rollout_id, mode=mode, resources_id=resources_id, config=checked, metadata=meta, at=now
                ),
            )
        if status is not UNSET:
            await self._set_status(rollout_id, status, now)
        return rollout_view(await self._state(rollout_id))

    async def _set_status(self, rollout_id: str, status: str, now: float) -> None:
        state = await self._state(rollout_id)
        if status == state.status:
            return
        if decider.is_terminal(state):
            raise IllegalTransition(rollout_id, str(state.status), f"update_rollout(status={status!r})")
        if status in ("cancelled", "failed"):
            cls = CancelRollout if status == "cancelled" else ParkRollout
            await self._end_rollout(state, cls(rollout_id=rollout_id, reason="update_rollout", at=now))
        elif status == "succeeded" and state.latest is not None:
            await self.update_attempt(rollout_id, state.latest.attempt_id, status="succeeded")
        else:
            raise IllegalTransition(rollout_id, str(state.status), f"update_rollout(status={status!r})")

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: Any = UNSET,
        worker_id: Any = UNSET,
        last_heartbeat_time: Any = UNSET,
        metadata: Any = UNSET,
    ) -> Attempt:
        """Change an attempt's status (through the lifecycle) or fields; ``attempt_id="latest"`` works."""
        state: RolloutState | None = None
        if attempt_id == "latest":
            state = await self._state(rollout_id)
            if state.latest is None:
                raise UnknownAttempt(rollout_id, attempt_id)
            attempt_id = state.latest.attempt_id
        now = self.clock()
        if worker_id is not UNSET or metadata is not UNSET or last_heartbeat_time is not UNSET:
            meta = UNSET if metadata is UNSET else metadata_json(metadata)
            beat = UNSET if last_heartbeat_time is UNSET else (last_heartbeat_time or now)
            state = await self._apply(
                rollout_id,
                UpdateAttempt(
                    rollout_id=rollout_id,
                    attempt_id=attempt_id,
                    worker_id=worker_id,
                    metadata=meta,
                    last_heartbeat_time=beat,
                    at=now,
                ),
            )
        if last_heartbeat_time is not UNSET:  # also a sign of life for the coordinator
            await self.heartbeat(rollout_id, attempt_id, worker_id=None, at=last_heartbeat_time or now)
        if status is not UNSET:
            state = await self._attempt_status(rollout_id, attempt_id, status, now)
        state = state or await self._state(rollout_id)
        attempt = state.attempt(attempt_id)
        if attempt is None:
            raise UnknownAttempt(rollout_id, attempt_id)
        return attempt_view(rollout_id, attempt)

    async def _attempt_status(self, rollout_id: str, attempt_id: str, status: str, now: float) -> RolloutState:
        if status in ("succeeded", "failed"):
            error = ErrorInfo(type="Error", message="reported failed") if status == "failed" else None
            cmd: Any = FinishAttempt(rollout_id=rollout_id, attempt_id=attempt_id, status=status, error=error, at=now)
        elif status == "running":
            cmd = MarkAttemptRunning(rollout_id=rollout_id, attempt_id=attempt_id, at=now)
        elif status in ("timeout", "unresponsive"):
            cmd = ExpireAttempt(rollout_id=rollout_id, attempt_id=attempt_id, status=status, at=now)
        else:
            raise InvalidCommand(f"attempt {attempt_id!r}: status {status!r} cannot be set")
        state = await self._apply(rollout_id, cmd)
        attempt = state.attempt(attempt_id)
        await self._sync_worker(attempt.worker_id if attempt else None, state)
        return state

    async def finish_attempt(
        self, rollout_id: str, attempt_id: str, error: ErrorInfo | None = None, worker_id: str | None = None
    ) -> Attempt:
        """voltbus addition: end an attempt, failed with ``error`` or succeeded when there is none; with
        ``worker_id``, refused (IllegalTransition) unless that worker holds the attempt."""
        cmd = FinishAttempt(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            status="failed" if error else "succeeded",
            error=error,
            worker_id=UNSET if worker_id is None else worker_id,
            at=self.clock(),
        )
        state = await self._apply(rollout_id, cmd)
        attempt = state.attempt(attempt_id)
        assert attempt is not None
        await self._sync_worker(attempt.worker_id, state)
        return attempt_view(rollout_id, attempt)

    async def expire_attempt(
        self, rollout_id: str, attempt_id: str, status: str, last_heartbeat_at: float | None = None
    ) -> RolloutState:
        """voltbus addition (the coordinator's): end a silent or overdue attempt; retry per the config."""
        cmd = ExpireAttempt(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            status=status,  # type: ignore[arg-type]
            last_heartbeat_at=last_heartbeat_at,
            at=self.clock(),
        )
        result = await self.log.transact(self._decider, rollout_id, cmd)
        attempt = result.state.attempt(attempt_id)
        if result.events and attempt is not None:
            await self._sync_worker(attempt.worker_id, result.state)
        return result.state

    async def park_rollout(self, rollout_id: str, reason: str, dispatch_event_id: str | None = None) -> RolloutState:
        """voltbus addition (the coordinator's): fail a rollout that cannot be dispatched, with the reason;
        with ``dispatch_event_id``, only while that message is still the rollout's queue entry."""
        before = await self._state(rollout_id)
        cmd = ParkRollout(rollout_id=rollout_id, reason=reason, dispatch_event_id=dispatch_event_id, at=self.clock())
        return await self._end_rollout(before, cmd)

    async def cancel_rollout(self, rollout_id: str, reason: str = "") -> Rollout:
        """voltbus addition: cancel a rollout, ending its running attempt."""
        before = await self._state(rollout_id)
        return rollout_view(
            await self._end_rollout(before, CancelRollout(rollout_id=rollout_id, reason=reason, at=self.clock()))
        )

    async def _end_rollout(self, before: RolloutState, cmd: CancelRollout | ParkRollout) -> RolloutState:
        """Cancel or park a rollout, then free the worker of the attempt it ended."""
        after = await self._apply(cmd.rollout_id, cmd)
        worker = before.latest.worker_id if before.latest and before.latest.status in ACTIVE_ATTEMPT else None
        await self._sync_worker(worker, after)
        return after

    async def heartbeat(self, rollout_id: str, attempt_id: str, worker_id: str | None, at: float | None = None) -> None:
        """Record a sign of life for an attempt (the coordinator's unresponsiveness clock restarts)."""
        at = self.clock() if at is None else at
        event = AttemptHeartbeatSent(
            event_id=derive_id(rollout_id, attempt_id, "hb", repr(at)),
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            worker_id=worker_id or "unknown",
            at=at,
        )
        await self.log.publish_spans([event])

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        """The rollout with its latest attempt, or None when it does not exist."""
        state, seq = await self.log.load(decider, rollout_id)
        if decider.is_terminal(state):
            await self.saw_ended(seq, [rollout_id])  # a query after it sees the end and the spans
        return rollout_view(state) if state.status is not None else None

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The attempt with the highest sequence id, or None."""
        state, _ = await self.log.load(decider, rollout_id)
        return attempt_view(rollout_id, state.latest) if state.latest else None

    async def get_attempts(self, rollout_id: str) -> list[Attempt]:
        """voltbus addition: every attempt of a rollout, in order (UnknownRollout if none)."""
        state = await self._state(rollout_id)
        return [attempt_view(rollout_id, a) for a in state.attempts]
