"""The rollout decider: rollout and attempt lifecycles as four pure functions (no clock, ids or I/O).

Agent Lightning 0.3's statuses and retry policy, with its quirks fixed: terminal rollouts absorb
everything, cancel ends the running attempt, unknown ids are errors, late spans never revive.
"""

from __future__ import annotations

import msgspec

from voltbus.schemas.base import derive_id
from voltbus.schemas.commands import (
    CancelRollout,
    ClaimRollout,
    ExpireAttempt,
    FinishAttempt,
    MarkAttemptRunning,
    ParkRollout,
    QueueRollout,
    RolloutCommand,
    StartAttempt,
    StartRollout,
    UpdateAttempt,
    UpdateRollout,
)
from voltbus.schemas.errors import IllegalTransition, UnknownAttempt, UnknownRollout
from voltbus.schemas.rollouts import (
    AttemptClaimed,
    AttemptFailed,
    AttemptMarkedUnresponsive,
    AttemptStarted,
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

from .authority import held_by_other
from .evolve import evolve, fold, record
from .state import ACTIVE_ATTEMPT, QUEUED_ROLLOUT, TERMINAL_ROLLOUT, AttemptState, RolloutState, retry_status

_encode = msgspec.json.Encoder().encode

RULES = 2
"""The lifecycle rules new rollouts are created under (``RolloutQueued.rules``)."""


__all__ = ["decide", "evolve", "fold", "initial_state", "is_terminal"]


def initial_state() -> RolloutState:
    """A rollout that does not exist yet."""
    return RolloutState()


def is_terminal(state: RolloutState) -> bool:
    """Succeeded, failed and cancelled rollouts absorb every later event."""
    return state.status in TERMINAL_ROLLOUT


def _id(cmd: RolloutCommand, *parts: str) -> str:
    """Event id from the whole command: a retried command yields the same ids, another one new ids."""
    return derive_id(cmd.rollout_id, type(cmd).__name__, _encode(cmd).hex(), *parts)


def _illegal(state: RolloutState, cmd: RolloutCommand, what: str = "") -> IllegalTransition:
    return IllegalTransition(cmd.rollout_id + (f"/{what}" if what else ""), str(state.status), type(cmd).__name__)


def _attempt(
    state: RolloutState, cmd: FinishAttempt | ExpireAttempt | MarkAttemptRunning | UpdateAttempt
) -> AttemptState:
    found = state.attempt(cmd.attempt_id)
    if found is None:
        raise UnknownAttempt(cmd.rollout_id, cmd.attempt_id)
    return found


def _held(state: RolloutState, cmd: FinishAttempt | MarkAttemptRunning | UpdateAttempt) -> AttemptState:
    """The command's attempt, refused unless the caller holds its key (an unkeyed attempt: anyone may)."""
    found = _attempt(state, cmd)
    if found.holder_key is not None and cmd.holder_key != found.holder_key:
        raise _illegal(state, cmd, f"{cmd.attempt_id} (held by another worker's key: only its holder may change it)")
    return found


def _after_attempt(
    state: RolloutState, attempt: AttemptState, status: str, cmd: FinishAttempt | ExpireAttempt, reason: str
) -> RolloutEvent:
    """The rollout event that follows an unsuccessful end of its latest attempt: requeue or fail."""
    if retry_status(status, attempt.sequence_id, state.config) == "requeuing":  # type: ignore[arg-type]
        return RolloutRequeued(
            event_id=_id(cmd, "requeued"),
            rollout_id=cmd.rollout_id,
            attempt_id=attempt.attempt_id,
            attempt_status=status,
            reason=reason,  # type: ignore[arg-type]
            at=cmd.at,
        )
    return RolloutFailed(
        event_id=_id(cmd, "failed"), rollout_id=cmd.rollout_id, attempt_id=attempt.attempt_id, reason=reason, at=cmd.at
    )


def _changing(state: RolloutState, event: RolloutEvent) -> list[RolloutEvent]:
    """An update that changes nothing (a repeat, or all fields UNSET) appends nothing."""
    return [event] if record(state, event) != state else []


def decide(cmd: RolloutCommand, state: RolloutState) -> list[RolloutEvent]:
    """The events ``cmd`` produces in ``state``: [] for a repeat, an InvalidCommand when refused."""
    if state.status is None and not isinstance(cmd, QueueRollout | StartRollout):
        raise UnknownRollout(cmd.rollout_id)
    match cmd:
        case QueueRollout() | StartRollout():
            if state.status is not None:
                if state.created_event_id == _id(cmd, "created"):
                    return []
                raise _illegal(state, cmd)
            fields = {k: getattr(cmd, k) for k in ("input", "mode", "resources_id", "config", "metadata")}
            fields["rules"] = RULES
            if isinstance(cmd, QueueRollout):
                return [
                    RolloutQueued(event_id=_id(cmd, "created"), rollout_id=cmd.rollout_id, queued_at=cmd.at, **fields)
                ]
            return [
                RolloutStarted(
                    event_id=_id(cmd, "created"),
                    rollout_id=cmd.rollout_id,
                    attempt_id=cmd.attempt_id,
                    worker_id=cmd.worker_id,
                    at=cmd.at,
                    holder_key=cmd.holder_key,
                    **fields,
                )
            ]
        case ClaimRollout() | StartAttempt():
            if state.attempt(cmd.attempt_id) is not None:
                return []  # a repeat: an attempt id names one attempt of the rollout
            claimable = isinstance(cmd, StartAttempt) or (
                state.status in QUEUED_ROLLOUT and state.dispatch_event_id == cmd.dispatch_event_id
            )
            if is_terminal(state) or not claimable:
                raise _illegal(state, cmd)
            if isinstance(cmd, ClaimRollout) and cmd.runner_group != state.config.runner_group:
                raise _illegal(state, cmd, f"runner group {state.config.runner_group!r}")
            if held_by_other(state, cmd.holder_key):
                raise _illegal(state, cmd, f"{state.latest.attempt_id} (held by another worker)")  # type: ignore[union-attr]
            return [
                AttemptClaimed(
                    event_id=_id(cmd, "claimed"),
                    rollout_id=cmd.rollout_id,
                    attempt_id=cmd.attempt_id,
                    sequence_id=len(state.attempts) + 1,
                    worker_id=cmd.worker_id,
                    at=cmd.at,
                    dispatch_event_id=getattr(cmd, "dispatch_event_id", None),
                    running=getattr(cmd, "start", False),
                    holder_key=cmd.holder_key,
                )
            ]
        case MarkAttemptRunning():
            attempt = _held(state, cmd)
            if attempt is not state.latest or attempt.status != "preparing" or is_terminal(state):
                return []
            return [
                AttemptStarted(
                    event_id=_id(cmd, "running"), rollout_id=cmd.rollout_id, attempt_id=cmd.attempt_id, at=cmd.at
                )
            ]
        case FinishAttempt():
            return _finish(cmd, state, _held(state, cmd))
        case ExpireAttempt():
            attempt = _attempt(state, cmd)
            if attempt is not state.latest or attempt.status not in ACTIVE_ATTEMPT:
                return []
            cls = AttemptTimedOut if cmd.status == "timeout" else AttemptMarkedUnresponsive
            extra = (
                {"timeout_seconds": state.config.timeout_seconds}
                if cmd.status == "timeout"
                else {"last_heartbeat_at": cmd.last_heartbeat_at}
            )
            ended = cls(
                event_id=_id(cmd, cmd.status), rollout_id=cmd.rollout_id, attempt_id=cmd.attempt_id, at=cmd.at, **extra
            )
            return [ended, _after_attempt(state, attempt, cmd.status, cmd, f"attempt {cmd.status}")]
        case CancelRollout():
            if state.status == "cancelled":
                return []
            if is_terminal(state):
                raise _illegal(state, cmd)
            return [
                RolloutCancelled(
                    event_id=_id(cmd, "cancelled"), rollout_id=cmd.rollout_id, reason=cmd.reason, at=cmd.at
                )
            ]
        case ParkRollout():
            if is_terminal(state) or _stale_dispatch(state, cmd.dispatch_event_id):
                return []
            return [RolloutFailed(event_id=_id(cmd, "parked"), rollout_id=cmd.rollout_id, reason=cmd.reason, at=cmd.at)]
        case UpdateRollout():
            fields = {k: getattr(cmd, k) for k in ("mode", "resources_id", "config", "metadata")}
            updated = RolloutUpdated(event_id=_id(cmd, "updated"), rollout_id=cmd.rollout_id, at=cmd.at, **fields)
            return _changing(state, updated)
        case UpdateAttempt():
            fields = {k: getattr(cmd, k) for k in ("attempt_id", "worker_id", "metadata", "last_heartbeat_time")}
            _held(state, cmd)
            updated = AttemptUpdated(event_id=_id(cmd, "updated"), rollout_id=cmd.rollout_id, at=cmd.at, **fields)
            return _changing(state, updated)
    raise TypeError(f"not a rollout command: {cmd!r}")


def _stale_dispatch(state: RolloutState, dispatch_event_id: str | None) -> bool:
    """A dead dispatch message that is no longer the rollout's queue entry (it was claimed meanwhile)."""
    return dispatch_event_id is not None and (
        state.status not in QUEUED_ROLLOUT or state.dispatch_event_id != dispatch_event_id
    )


def _finish(cmd: FinishAttempt, state: RolloutState, attempt: AttemptState) -> list[RolloutEvent]:
    if cmd.worker_id is not msgspec.UNSET and attempt.worker_id not in (None, cmd.worker_id):
        held = f"{cmd.attempt_id} (held by worker {attempt.worker_id!r}, not {cmd.worker_id!r})"
        raise _illegal(state, cmd, held)
    if attempt.status == cmd.status:
        return []
    if attempt.status not in ACTIVE_ATTEMPT or is_terminal(state):  # a finished rollout records no more
        raise _illegal(state, cmd, f"{cmd.attempt_id} ({attempt.status})")
    if cmd.status == "succeeded":
        return [
            AttemptSucceeded(
                event_id=_id(cmd, "succeeded"), rollout_id=cmd.rollout_id, attempt_id=cmd.attempt_id, at=cmd.at
            )
        ]
    error = cmd.error or ErrorInfo(type="Error", message="the attempt failed")
    failed = AttemptFailed(
        event_id=_id(cmd, "failed-attempt"),
        rollout_id=cmd.rollout_id,
        attempt_id=cmd.attempt_id,
        error=error,
        at=cmd.at,
    )
    if attempt is not state.latest:
        return [failed]
    return [failed, _after_attempt(state, attempt, "failed", cmd, f"{error.type}: {error.message}")]
