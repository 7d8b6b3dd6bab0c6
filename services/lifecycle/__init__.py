"""The rollout lifecycle as a decider (a library, not a service): every writer of a rollout runs it.

Runners claim, the coordinator expires and retries, the store API enqueues and updates; all of them
append through ``EventLog.transact`` with this one decider, so optimistic concurrency protects the
same rules everywhere.
"""

from __future__ import annotations

from . import decider
from .state import AttemptState, RolloutState, retry_status

__all__ = ["AttemptState", "RolloutState", "decider", "retry_status"]
