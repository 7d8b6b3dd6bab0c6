"""The state a rollout's events fold into, and the retry policy (Agent Lightning 0.3's meaning)."""

from __future__ import annotations

import msgspec

from voltbus.schemas.base import Json, Mode
from voltbus.schemas.rollouts import AttemptStatus, ErrorInfo, RolloutConfig, RolloutStatus

ACTIVE_ATTEMPT: frozenset[str] = frozenset({"preparing", "running"})
"""Attempt statuses of an attempt still in progress."""
TERMINAL_ROLLOUT: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
"""Rollout statuses that absorb every later event."""
QUEUED_ROLLOUT: frozenset[str] = frozenset({"queuing", "requeuing"})
"""Rollout statuses that wait for a claim."""


class AttemptState(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt as its events describe it."""

    attempt_id: str
    sequence_id: int
    status: AttemptStatus = "preparing"
    worker_id: str | None = None
    start_time: float = 0.0
    end_time: float | None = None
    last_heartbeat_time: float | None = None
    error: ErrorInfo | None = None
    metadata: dict[str, Json] = {}
    holder_key: str | None = None
    """Public key of the worker that claimed it: its later events must carry that key's signature."""


class RolloutState(msgspec.Struct, frozen=True, kw_only=True):
    """A rollout as its events describe it; ``status`` None means it does not exist."""

    rollout_id: str = ""
    status: RolloutStatus | None = None
    input: Json = msgspec.Raw(b"null")
    mode: Mode | None = None
    resources_id: str | None = None
    config: RolloutConfig = RolloutConfig()
    metadata: dict[str, Json] = {}
    start_time: float = 0.0
    end_time: float | None = None
    attempts: tuple[AttemptState, ...] = ()
    dispatch_event_id: str | None = None
    """The queued/requeued event a claim must consume (None: nothing to claim)."""
    reason: str = ""
    """Why the rollout failed or was cancelled."""
    created_event_id: str = ""
    """Id of the event that created the rollout (a repeated create is recognised by it)."""
    rules: int = 1
    """The lifecycle rules it was created under (``RolloutQueued.rules``)."""

    @property
    def latest(self) -> AttemptState | None:
        """The attempt with the highest sequence id."""
        return self.attempts[-1] if self.attempts else None

    def attempt(self, attempt_id: str) -> AttemptState | None:
        """The attempt with this id, if any."""
        return next((a for a in self.attempts if a.attempt_id == attempt_id), None)


def retry_status(status: AttemptStatus, sequence_id: int, config: RolloutConfig) -> RolloutStatus:
    """Rollout status after its latest attempt ended with ``status``.

    >>> cfg = RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout"])
    >>> retry_status("failed", 1, cfg), retry_status("failed", 3, cfg), retry_status("unresponsive", 1, cfg)
    ('requeuing', 'failed', 'failed')
    >>> retry_status("succeeded", 1, cfg)
    'succeeded'
    """
    if status in ("preparing", "running", "succeeded"):
        return status
    if status in config.retry_condition and sequence_id < config.max_attempts:
        return "requeuing"
    return "failed"
