"""``evolve``: how each rollout event changes the rollout's state (recording only, never refusing)."""

from __future__ import annotations

import msgspec
from msgspec.structs import replace

from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptFailed,
    AttemptMarkedUnresponsive,
    AttemptStarted,
    AttemptStatus,
    AttemptSucceeded,
    AttemptTimedOut,
    AttemptUpdated,
    ErrorInfo,
    RolloutCancelled,
    RolloutEvent,
    RolloutFailed,
    RolloutQueued,
    RolloutRequeued,
    RolloutStarted,
    RolloutUpdated,
)

from .authority import refusal
from .state import ACTIVE_ATTEMPT, TERMINAL_ROLLOUT, AttemptState, RolloutState


def _with_attempt(state: RolloutState, attempt_id: str, **changes: object) -> RolloutState:
    attempts = tuple(replace(a, **changes) if a.attempt_id == attempt_id else a for a in state.attempts)
    return replace(state, attempts=attempts)


def _end_active(state: RolloutState, error: ErrorInfo, at: float) -> RolloutState:
    """Close the latest attempt if it is still in progress (cancel and park end it)."""
    latest = state.latest
    if latest is None or latest.status not in ACTIVE_ATTEMPT:
        return state
    return _with_attempt(state, latest.attempt_id, status="failed", error=error, end_time=at)


def _is_latest(state: RolloutState, attempt_id: str) -> bool:
    return state.latest is not None and state.latest.attempt_id == attempt_id


def evolve(state: RolloutState, event: RolloutEvent) -> RolloutState:
    """Record ``event``; never raises, a terminal rollout's status never changes again, and an attempt's own
    events count only when its holder signed them (``authority.refusal``)."""
    if refusal(state, event) is not None:
        return state
    return record(state, event)


def fold(state: RolloutState, event: RolloutEvent, subject: str) -> RolloutState:
    """``evolve`` for an event read from the log: ``subject`` is where it was stored (who could write it)."""
    if refusal(state, event, subject) is not None:
        return state
    return record(state, event)


def record(state: RolloutState, event: RolloutEvent) -> RolloutState:
    """Record ``event`` as its writer meant it (the decider, before its holder signs what it decided)."""
    if state.status is None and not isinstance(event, RolloutQueued | RolloutStarted):
        return state
    if state.status in TERMINAL_ROLLOUT and not isinstance(event, RolloutUpdated | AttemptUpdated):
        return state
    match event:
        case RolloutQueued() if state.status is None:
            return RolloutState(
                rollout_id=event.rollout_id,
                status="queuing",
                input=event.input,
                mode=event.mode,
                resources_id=event.resources_id,
                config=event.config,
                metadata=event.metadata,
                start_time=event.queued_at,
                dispatch_event_id=event.event_id,
                created_event_id=event.event_id,
                rules=event.rules,
            )
        case RolloutStarted() if state.status is None:
            first = AttemptState(
                attempt_id=event.attempt_id,
                sequence_id=1,
                worker_id=event.worker_id,
                start_time=event.at,
                holder_key=event.holder_key,
            )
            return RolloutState(
                rollout_id=event.rollout_id,
                status="preparing",
                input=event.input,
                mode=event.mode,
                resources_id=event.resources_id,
                config=event.config,
                metadata=event.metadata,
                start_time=event.at,
                attempts=(first,),
                created_event_id=event.event_id,
                rules=event.rules,
            )
        case RolloutRequeued():
            return replace(state, status="requeuing", dispatch_event_id=event.event_id)
        case AttemptClaimed() if state.attempt(event.attempt_id) is None:
            status: AttemptStatus = "running" if event.running else "preparing"
            new = AttemptState(
                attempt_id=event.attempt_id,
                sequence_id=event.sequence_id,
                worker_id=event.worker_id,
                start_time=event.at,
                status=status,
                last_heartbeat_time=event.at if event.running else None,
                holder_key=event.holder_key,
            )
            return replace(state, status=status, attempts=(*state.attempts, new), dispatch_event_id=None)
        case AttemptStarted() if state.attempt(event.attempt_id) is not None:
            moved = _with_attempt(state, event.attempt_id, status="running", last_heartbeat_time=event.at)
            return replace(moved, status="running") if _is_latest(state, event.attempt_id) else moved
        case AttemptSucceeded() if state.attempt(event.attempt_id) is not None:
            moved = _with_attempt(state, event.attempt_id, status="succeeded", end_time=event.at)
            latest = _is_latest(state, event.attempt_id)
            return replace(moved, status="succeeded", end_time=event.at) if latest else moved
        case AttemptFailed() if state.attempt(event.attempt_id) is not None:
            return _with_attempt(state, event.attempt_id, status="failed", error=event.error, end_time=event.at)
        case AttemptTimedOut() | AttemptMarkedUnresponsive() if state.attempt(event.attempt_id) is not None:
            status = "timeout" if isinstance(event, AttemptTimedOut) else "unresponsive"
            return _with_attempt(state, event.attempt_id, status=status, end_time=event.at)
        case RolloutFailed():
            ended = _end_active(state, ErrorInfo(type="RolloutFailed", message=event.reason), event.at)
            return replace(ended, status="failed", end_time=event.at, reason=event.reason, dispatch_event_id=None)
        case RolloutCancelled():
            ended = _end_active(state, ErrorInfo(type="Cancelled", message=event.reason), event.at)
            return replace(ended, status="cancelled", end_time=event.at, reason=event.reason, dispatch_event_id=None)
        case RolloutUpdated():
            fields = ("mode", "resources_id", "config", "metadata")
            changes = {f: getattr(event, f) for f in fields if getattr(event, f) is not msgspec.UNSET}
            return replace(state, **changes)
        case AttemptUpdated() if state.attempt(event.attempt_id) is not None:
            changes = {
                f: getattr(event, f)
                for f in ("worker_id", "metadata", "last_heartbeat_time")
                if getattr(event, f) is not msgspec.UNSET
            }
            return _with_attempt(state, event.attempt_id, **changes)
    return state
