"""Rollout and attempt lifecycle events: the control stream, one subject group per rollout.

Statuses and ``RolloutConfig`` keep Agent Lightning 0.3's names and meaning (``types/core.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .base import Event, Id, Json, Mode, Timestamp

RolloutStatus = Literal["queuing", "preparing", "running", "succeeded", "failed", "cancelled", "requeuing"]
"""Status of a rollout, as Agent Lightning names it (``queuing`` is the initial one)."""

AttemptStatus = Literal["preparing", "running", "succeeded", "failed", "unresponsive", "timeout"]
"""Status of one attempt, as Agent Lightning names it (``preparing`` is the initial one)."""

SequenceId = Annotated[int, msgspec.Meta(ge=1)]
"""A 1-based counter: the attempt number of a rollout, or a span's order within a rollout."""


class RolloutConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Timeouts and retry policy of a rollout; by default one attempt and no retry."""

    timeout_seconds: float | None = None
    """Longest an attempt may run before it is marked ``timeout``; None means no limit."""
    unresponsive_seconds: float | None = None
    """Longest silence (no heartbeat or span) before an attempt is marked ``unresponsive``."""
    max_attempts: Annotated[int, msgspec.Meta(ge=1)] = 1
    """Attempts allowed in total, the first included; an attempt's sequence_id is its number."""
    retry_condition: list[AttemptStatus] = []
    """Attempt end statuses that requeue the rollout while attempts remain; empty: never retry."""
    runner_group: str = ""
    """Only runners of this group claim the rollout (``runner.group``; a ``Trainer`` run's own runners);
    ``""``: the default group, every plain ``voltbus runner``. A voltbus addition."""
    env_map: dict[str, str] = {}
    """Environment variable -> task field (``input.question``, ``input.a.0``; ``input``: the whole task) or a
    literal, set for the rollout's agent process, as Agent Lightning 1.0's ``RolloutLocalConfig.env_map``; a
    non-string value is set as JSON; a missing field fails the attempt. Needs an isolated runner."""


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What went wrong: an exception's class name, message and optional traceback."""

    type: str
    """Exception class name, e.g. ``ValueError``."""
    message: str
    """The exception's message."""
    traceback: str | None = None
    """Formatted traceback, when the producer had one."""


class RolloutQueued(Event, frozen=True, kw_only=True):
    """A rollout was created and waits for a runner (dispatchable; status ``queuing``)."""

    rollout_id: Id
    """The rollout's id; also a subject token."""
    input: Json
    """The task: any JSON value, kept verbatim."""
    mode: Mode | None = None
    """What the rollout is for (train, val, test), if said."""
    resources_id: Id | None = None
    """The resources version to run with; None means the latest at claim time."""
    config: RolloutConfig = RolloutConfig()
    """Timeouts and retry policy."""
    metadata: dict[str, Json] = {}
    """Free-form metadata from the producer; values are any JSON."""
    queued_at: Timestamp
    """When the rollout was queued (Agent Lightning's ``start_time``)."""
    rules: int = 1
    """The lifecycle rules the rollout was created under: 2 (this version on) stores ends by authority (timeouts,
    unresponsive, cancel, unsigned final failure) only on the rollout's authority subject, which runners cannot
    publish to; 1: a rollout from before that rule."""


class RolloutRequeued(Event, frozen=True, kw_only=True):
    """An attempt ended in a retryable status and attempts remain (dispatchable; ``requeuing``)."""

    rollout_id: Id
    """The rollout put back in the queue."""
    attempt_id: Id
    """The attempt that ended."""
    attempt_status: AttemptStatus
    """How that attempt ended: ``failed``, ``timeout`` or ``unresponsive``."""
    reason: str = ""
    """Human-readable cause, for logs and dashboards."""
    at: Timestamp
    """When the rollout was requeued."""


class AttemptClaimed(Event, frozen=True, kw_only=True):
    """A worker claimed the rollout and opened a new attempt (Agent Lightning's start, ``preparing``)."""

    rollout_id: Id
    """The rollout claimed."""
    attempt_id: Id
    """The new attempt's id."""
    sequence_id: SequenceId
    """Attempt number within the rollout: 1 for the first try, n for the n-th."""
    worker_id: Id | None = None
    """The claiming worker, when known."""
    at: Timestamp
    """When the attempt was claimed (the attempt's ``start_time``)."""
    dispatch_event_id: Id | None = None
    """The queued/requeued event this claim consumed; None for a direct ``start_attempt``."""
    running: bool = False
    """The claimant started the agent at once: the attempt is ``running`` from the claim on (its first
    heartbeat is the claim), and no ``AttemptStarted`` follows. False: ``preparing`` until one does."""
    holder_key: str | None = None
    """The claimant's Ed25519 public key (base64url): only events signed with it may start, end or update the
    attempt (docs/security.md, "Attempt authority"). None: an unkeyed attempt, as before keys existed."""


class AttemptStarted(Event, frozen=True, kw_only=True):
    """The attempt began running: the agent started, or its first span arrived (``running``)."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The attempt now running."""
    at: Timestamp
    """When it started running."""
    holder_sig: str | None = None
    """Ed25519 signature (base64url) of the attempt's holder over this event (``holder_sig`` left out); an
    attempt claimed with a ``holder_key`` records only its holder's signed events."""


class AttemptSucceeded(Event, frozen=True, kw_only=True):
    """The agent returned normally (``succeeded``); the rollout succeeds with it."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The attempt that succeeded."""
    at: Timestamp
    """When it ended (the attempt's ``end_time``)."""
    holder_sig: str | None = None
    """Ed25519 signature (base64url) of the attempt's holder over this event (``holder_sig`` left out); an
    attempt claimed with a ``holder_key`` records only its holder's signed events."""


class AttemptFailed(Event, frozen=True, kw_only=True):
    """The agent raised (``failed``); a retry or a final failure follows as its own event."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The attempt that failed."""
    error: ErrorInfo
    """What the agent raised."""
    at: Timestamp
    """When it ended (the attempt's ``end_time``)."""
    holder_sig: str | None = None
    """Ed25519 signature (base64url) of the attempt's holder over this event (``holder_sig`` left out); an
    attempt claimed with a ``holder_key`` records only its holder's signed events."""


class AttemptTimedOut(Event, frozen=True, kw_only=True):
    """The attempt ran longer than ``timeout_seconds`` (``timeout``)."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The attempt that ran too long."""
    timeout_seconds: float | None = None
    """The limit that was exceeded, as configured."""
    at: Timestamp
    """When the coordinator noticed."""
    holder_sig: str | None = None
    """The attempt's holder's signature when that worker ended it itself (a restarted runner settling what its
    previous process left); None: an end by authority, stored on the rollout's authority subject."""


class AttemptMarkedUnresponsive(Event, frozen=True, kw_only=True):
    """No heartbeat or span for ``unresponsive_seconds`` (``unresponsive``); a later span revives it."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The silent attempt."""
    last_heartbeat_at: Timestamp | None = None
    """Last sign of life seen; None when none ever arrived (counted from the claim)."""
    at: Timestamp
    """When the coordinator noticed."""
    holder_sig: str | None = None
    """The attempt's holder's signature when that worker ended it itself (a restarted runner settling what its
    previous process left); None: an end by authority, stored on the rollout's authority subject."""


class RolloutFailed(Event, frozen=True, kw_only=True):
    """The rollout ended in failure for good: no retry applies or attempts are spent (final)."""

    rollout_id: Id
    """The rollout that failed."""
    attempt_id: Id | None = None
    """Its last attempt, when there was one."""
    reason: str
    """Human-readable cause."""
    at: Timestamp
    """When the rollout ended (its ``end_time``)."""
    holder_sig: str | None = None
    """The signature of ``attempt_id``'s holder when that worker failed it for good; None: an end by authority
    (coordinator, learner), stored on the rollout's authority subject."""


class RolloutCancelled(Event, frozen=True, kw_only=True):
    """The rollout was cancelled by a user or the learner (final)."""

    rollout_id: Id
    """The rollout cancelled."""
    reason: str = ""
    """Why, if said."""
    at: Timestamp
    """When it was cancelled (its ``end_time``)."""


class RolloutStarted(Event, frozen=True, kw_only=True):
    """A rollout created and claimed at once, bypassing the queue (Agent Lightning's ``start_rollout``)."""

    rollout_id: Id
    """The new rollout's id."""
    input: Json
    """The task, any JSON."""
    mode: Mode | None = None
    """train, val or test."""
    resources_id: Id | None = None
    """Resources version the rollout runs with (the latest at creation when not given)."""
    config: RolloutConfig = RolloutConfig()
    """Timeouts and retry policy."""
    metadata: dict[str, Json] = {}
    """Free-form metadata."""
    attempt_id: Id
    """Attempt 1's id."""
    worker_id: Id | None = None
    """The worker that started it, when known."""
    at: Timestamp
    """Creation time: the rollout's and attempt 1's ``start_time``."""
    rules: int = 1
    """The lifecycle rules the rollout was created under: 2 (this version on) stores ends by authority (timeouts,
    unresponsive, cancel, unsigned final failure) only on the rollout's authority subject, which runners cannot
    publish to; 1: a rollout from before that rule."""
    holder_key: str | None = None
    """The claimant's Ed25519 public key (base64url): only events signed with it may start, end or update the
    attempt (docs/security.md, "Attempt authority"). None: an unkeyed attempt, as before keys existed."""


class RolloutUpdated(Event, frozen=True, kw_only=True):
    """Fields of a rollout changed (``update_rollout`` without a status); absent fields keep their value."""

    rollout_id: Id
    """The rollout updated."""
    mode: Mode | None | msgspec.UnsetType = msgspec.UNSET
    """New mode, when changed."""
    resources_id: Id | None | msgspec.UnsetType = msgspec.UNSET
    """New resources version, when changed."""
    config: RolloutConfig | msgspec.UnsetType = msgspec.UNSET
    """New config, when changed."""
    metadata: dict[str, Json] | msgspec.UnsetType = msgspec.UNSET
    """New metadata (replaces the old), when changed."""
    at: Timestamp
    """When it was updated."""


class AttemptUpdated(Event, frozen=True, kw_only=True):
    """Fields of an attempt changed (``update_attempt`` without a status); absent fields keep their value."""

    rollout_id: Id
    """The attempt's rollout."""
    attempt_id: Id
    """The attempt updated."""
    worker_id: Id | None | msgspec.UnsetType = msgspec.UNSET
    """New worker id, when changed."""
    metadata: dict[str, Json] | msgspec.UnsetType = msgspec.UNSET
    """New metadata (replaces the old), when changed."""
    last_heartbeat_time: Timestamp | msgspec.UnsetType = msgspec.UNSET
    """A heartbeat time reported through ``update_attempt``, when given."""
    at: Timestamp
    """When it was updated."""
    holder_sig: str | None = None
    """Ed25519 signature (base64url) of the attempt's holder over this event (``holder_sig`` left out); an
    attempt claimed with a ``holder_key`` records only its holder's signed events."""


RolloutEvent = (
    RolloutQueued
    | RolloutRequeued
    | AttemptClaimed
    | AttemptStarted
    | AttemptSucceeded
    | AttemptFailed
    | AttemptTimedOut
    | AttemptMarkedUnresponsive
    | RolloutFailed
    | RolloutCancelled
    | RolloutStarted
    | RolloutUpdated
    | AttemptUpdated
)
"""Every event on a rollout's subjects; the rollout decider folds these."""

DISPATCHABLE = (RolloutQueued, RolloutRequeued)
"""Events stored on a rollout's dispatch subject, which runners consume."""
