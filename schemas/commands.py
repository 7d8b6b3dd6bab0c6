"""Commands the rollout decider accepts: imperative, with every id and time inside (no clocks in deciders)."""

from __future__ import annotations

from typing import Literal

import msgspec

from .base import Command, Id, Json, Mode, Timestamp
from .rollouts import ErrorInfo, RolloutConfig


class QueueRollout(Command, frozen=True, kw_only=True):
    """Create a rollout and put it in the dispatch queue (``enqueue_rollout``)."""

    rollout_id: Id
    """Id of the new rollout."""
    input: Json
    """The task, any JSON."""
    mode: Mode | None = None
    """train, val or test."""
    resources_id: Id | None = None
    """Resources version (the caller resolves "latest")."""
    config: RolloutConfig = RolloutConfig()
    """Timeouts and retry policy."""
    metadata: dict[str, Json] = {}
    """Free-form metadata."""
    at: Timestamp
    """Creation time."""


class StartRollout(Command, frozen=True, kw_only=True):
    """Create a rollout with attempt 1 already claimed, bypassing the queue (``start_rollout``)."""

    rollout_id: Id
    """Id of the new rollout."""
    attempt_id: Id
    """Id of attempt 1."""
    input: Json
    """The task, any JSON."""
    mode: Mode | None = None
    """train, val or test."""
    resources_id: Id | None = None
    """Resources version."""
    config: RolloutConfig = RolloutConfig()
    """Timeouts and retry policy."""
    metadata: dict[str, Json] = {}
    """Free-form metadata."""
    worker_id: Id | None = None
    """The worker starting it."""
    holder_key: str | None = None
    """The claimant's public key, recorded on the attempt: only its holder may later start, end or update it."""
    at: Timestamp
    """Creation time."""


class ClaimRollout(Command, frozen=True, kw_only=True):
    """Claim a queued rollout through its dispatch event and open the next attempt (``dequeue_rollout``)."""

    rollout_id: Id
    """The rollout to claim."""
    attempt_id: Id
    """Id for the new attempt."""
    dispatch_event_id: Id
    """Event id of the queued/requeued message being claimed; a stale one loses."""
    worker_id: Id | None = None
    """The claiming worker."""
    holder_key: str | None = None
    """The claimant's public key, recorded on the attempt: only its holder may later start, end or update it."""
    at: Timestamp
    """Claim time."""
    start: bool = False
    """The claimant starts the agent at once (a runner): the attempt opens ``running``, with no
    ``AttemptStarted`` of its own. False (``dequeue_rollout``): it opens ``preparing``, as in Agent Lightning."""
    runner_group: str = ""
    """The claimant's runner group: a rollout of another group (``RolloutConfig.runner_group``) is refused."""


class StartAttempt(Command, frozen=True, kw_only=True):
    """Open a new attempt directly, outside the queue (``start_attempt``)."""

    rollout_id: Id
    """The rollout."""
    attempt_id: Id
    """Id for the new attempt."""
    worker_id: Id | None = None
    """The worker."""
    holder_key: str | None = None
    """The claimant's public key, recorded on the attempt: only its holder may later start, end or update it."""
    at: Timestamp
    """Start time."""


class MarkAttemptRunning(Command, frozen=True, kw_only=True):
    """The attempt's agent started, or its first span arrived."""

    rollout_id: Id
    """The rollout."""
    attempt_id: Id
    """The attempt."""
    holder_key: str | None = None
    """The caller's public key: refused on an attempt another key holds (the store fills it in)."""
    at: Timestamp
    """When it was seen running."""


class FinishAttempt(Command, frozen=True, kw_only=True):
    """The agent finished: succeeded, or failed with an error."""

    rollout_id: Id
    """The rollout."""
    attempt_id: Id
    """The attempt."""
    status: Literal["succeeded", "failed"]
    """How it ended."""
    error: ErrorInfo | None = None
    """What went wrong, for a failure."""
    worker_id: Id | msgspec.UnsetType = msgspec.UNSET
    """The worker ending it; when set, only the worker holding the attempt may end it (self-declared)."""
    holder_key: str | None = None
    """The caller's public key: refused on an attempt another key holds (the store fills it in)."""
    at: Timestamp
    """End time."""


class ExpireAttempt(Command, frozen=True, kw_only=True):
    """The coordinator found an attempt past its time limit or silent too long."""

    rollout_id: Id
    """The rollout."""
    attempt_id: Id
    """The attempt."""
    status: Literal["timeout", "unresponsive"]
    """Which limit it broke."""
    last_heartbeat_at: Timestamp | None = None
    """Last sign of life seen, for an unresponsive attempt."""
    at: Timestamp
    """When the coordinator decided."""


class CancelRollout(Command, frozen=True, kw_only=True):
    """Cancel the rollout, ending its active attempt."""

    rollout_id: Id
    """The rollout."""
    reason: str = ""
    """Why."""
    at: Timestamp
    """When."""


class ParkRollout(Command, frozen=True, kw_only=True):
    """Fail a rollout that cannot be dispatched (its dispatch message hit max deliveries)."""

    rollout_id: Id
    """The rollout."""
    reason: str
    """Why it was parked."""
    dispatch_event_id: Id | None = None
    """The dead dispatch message's event id: the rollout is parked only while that is still its queue entry."""
    at: Timestamp
    """When."""


class UpdateRollout(Command, frozen=True, kw_only=True):
    """Change a rollout's fields; UNSET fields keep their value."""

    rollout_id: Id
    """The rollout."""
    mode: Mode | None | msgspec.UnsetType = msgspec.UNSET
    """New mode."""
    resources_id: Id | None | msgspec.UnsetType = msgspec.UNSET
    """New resources version."""
    config: RolloutConfig | msgspec.UnsetType = msgspec.UNSET
    """New config."""
    metadata: dict[str, Json] | msgspec.UnsetType = msgspec.UNSET
    """New metadata (replaces the old)."""
    at: Timestamp
    """When."""


class UpdateAttempt(Command, frozen=True, kw_only=True):
    """Change an attempt's fields; UNSET fields keep their value."""

    rollout_id: Id
    """The rollout."""
    attempt_id: Id
    """The attempt."""
    worker_id: Id | None | msgspec.UnsetType = msgspec.UNSET
    """New worker id."""
    metadata: dict[str, Json] | msgspec.UnsetType = msgspec.UNSET
    """New metadata (replaces the old)."""
    last_heartbeat_time: Timestamp | msgspec.UnsetType = msgspec.UNSET
    """A heartbeat time to record on the attempt."""
    holder_key: str | None = None
    """The caller's public key: refused on an attempt another key holds (the store fills it in)."""
    at: Timestamp
    """When."""


RolloutCommand = (
    QueueRollout
    | StartRollout
    | ClaimRollout
    | StartAttempt
    | MarkAttemptRunning
    | FinishAttempt
    | ExpireAttempt
    | CancelRollout
    | ParkRollout
    | UpdateRollout
    | UpdateAttempt
)
"""Every command of the rollout lifecycle."""
