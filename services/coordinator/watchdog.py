"""The watchdog rule, pure: is the latest attempt of a rollout overdue or silent at time ``now``?

Agent Lightning 0.3's checks, in its order: the attempt's run time against ``timeout_seconds``,
then the time since its last sign of life (or since its start, if it never sent one) against
``unresponsive_seconds``.
"""

from __future__ import annotations

from typing import Literal

from voltbus.services.lifecycle import RolloutState
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT

Verdict = tuple[Literal["timeout", "unresponsive"], float | None]
"""Which limit was broken, and the last sign of life seen."""


def check(state: RolloutState, last_seen: float | None, now: float) -> Verdict | None:
    """The verdict for a rollout's latest attempt, or None while it is healthy.

    >>> from voltbus.services.lifecycle import AttemptState
    >>> from voltbus.schemas.rollouts import RolloutConfig
    >>> a = AttemptState(attempt_id="a1", sequence_id=1, status="running", start_time=100.0)
    >>> s = RolloutState(rollout_id="r", status="running", attempts=(a,),
    ...                  config=RolloutConfig(timeout_seconds=60, unresponsive_seconds=10))
    >>> check(s, last_seen=105.0, now=112.0), check(s, last_seen=105.0, now=116.0), check(s, None, now=161.0)
    (None, ('unresponsive', 105.0), ('timeout', None))
    """
    attempt = state.latest
    if state.status not in ("preparing", "running") or attempt is None or attempt.status not in ACTIVE_ATTEMPT:
        return None
    config = state.config
    if config.timeout_seconds is not None and now - attempt.start_time > config.timeout_seconds:
        return ("timeout", None)
    if config.unresponsive_seconds is not None:
        seen = (
            max(t for t in (last_seen, attempt.last_heartbeat_time) if t is not None)
            if (last_seen is not None or attempt.last_heartbeat_time is not None)
            else None
        )
        since = seen if seen is not None else attempt.start_time
        if now - since > config.unresponsive_seconds:
            return ("unresponsive", seen)
    return None
