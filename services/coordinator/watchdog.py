"""The watchdog rules, pure: is the latest attempt of a rollout overdue or silent at time ``now``, or is its
worker gone?

Agent Lightning 0.3's checks, in its order: the attempt's run time against ``timeout_seconds``,
then the time since its last sign of life (or since its start, if it never sent one) against
``unresponsive_seconds``. voltbus adds the worker rule, which needs no per-rollout config: see ``check_worker``.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import msgspec

from voltbus.schemas.workers import WorkerStatusReported
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


class Claim(NamedTuple):
    """Where and when the log stored an attempt's claim."""

    seq: int
    """Control stream sequence of the claim."""
    time: float
    """Server receive time of the claim."""


class WorkerLife(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker's reports say of its liveness, at the server's receive times (never the worker's clock)."""

    beat: float | None = None
    """Server time of its latest heartbeat (a report that moved ``last_heartbeat_time``); None: it never beat."""
    reported_beat: float | None = None
    """That report's own ``last_heartbeat_time`` (the writer's clock): only compared with the next one."""
    session_id: str | None = None
    """The runner process that holds the worker id now."""
    session_seq: int = 0
    """Control stream sequence of the report that opened that session."""


def observe(life: WorkerLife, report: WorkerStatusReported, seq: int, time: float) -> WorkerLife:
    """The worker's liveness after its report stored at ``seq``, server time ``time``.

    >>> r = WorkerStatusReported(event_id="e", worker_id="w", at=5.0, last_heartbeat_time=5.0, session_id="s1")
    >>> life = observe(WorkerLife(), r, seq=7, time=100.0)
    >>> (life.beat, life.session_seq), observe(life, r, seq=9, time=130.0).beat  # a copy is no beat
    ((100.0, 7), 100.0)
    >>> r2 = msgspec.structs.replace(r, last_heartbeat_time=6.0, session_id="s2")
    >>> later = observe(life, r2, seq=12, time=131.0)
    >>> later.beat, later.session_id, later.session_seq
    (131.0, 's2', 12)
    """
    beat = life.beat
    if report.last_heartbeat_time is not None and report.last_heartbeat_time != life.reported_beat:
        beat = time
    session_id, session_seq = life.session_id, life.session_seq
    if report.session_id is not None and report.session_id != session_id:
        session_id, session_seq = report.session_id, seq
    reported = report.last_heartbeat_time if report.last_heartbeat_time is not None else life.reported_beat
    return WorkerLife(beat=beat, reported_beat=reported, session_id=session_id, session_seq=session_seq)


def check_worker(
    state: RolloutState,
    life: WorkerLife | None,
    claim: Claim | None,
    seen: float | None,
    now: float | None,
    timeout: float,
    since: float,
) -> Verdict | None:
    """``unresponsive`` when the latest attempt's worker is gone, else None. Only workers that heartbeat are
    watched. Gone: the worker opened a new session after the claim (a restarted runner with the same id), or,
    with ``now`` (server time) and ``timeout`` > 0, neither it nor the attempt (``seen``: spans, heartbeats)
    showed a sign of life for ``timeout`` seconds, counted from ``since`` at the earliest (when the coordinator
    began to watch). The verdict carries the last sign of life.

    >>> from voltbus.services.lifecycle import AttemptState
    >>> a = AttemptState(attempt_id="a1", sequence_id=1, status="running", worker_id="w", start_time=1.0)
    >>> s = RolloutState(rollout_id="r", status="running", attempts=(a,))
    >>> life, claim = WorkerLife(beat=150.0, session_seq=3), Claim(seq=5, time=100.0)
    >>> [check_worker(s, life, claim, None, t, 60, 0) for t in (209.0, 211.0)]
    [None, ('unresponsive', 150.0)]
    >>> check_worker(s, life, claim, 180.0, 211.0, 60, 0), check_worker(s, life, claim, None, 211.0, 60, 200.0)
    (None, None)
    >>> restarted = msgspec.structs.replace(life, beat=205.0, session_seq=9)
    >>> check_worker(s, restarted, claim, None, None, 60, 0), check_worker(s, WorkerLife(), claim, None, 900, 60, 0)
    (('unresponsive', 205.0), None)
    """
    attempt = state.latest
    if state.status not in ("preparing", "running") or attempt is None or attempt.status not in ACTIVE_ATTEMPT:
        return None
    if attempt.worker_id is None or life is None or life.beat is None:
        return None
    last = max(t for t in (life.beat, seen, claim.time if claim else None) if t is not None)
    if claim is not None and life.session_seq > claim.seq:
        return ("unresponsive", last)
    if now is not None and timeout > 0 and now - max(last, since) > timeout:
        return ("unresponsive", last)
    return None
