"""The coordinator's view of the log: every unfinished rollout (folded with the lifecycle's evolve),
the last sign of life of each attempt (spans, model calls, rewards, heartbeats), where each attempt was
claimed, and each worker's liveness (its heartbeats and sessions).

It is rebuilt from the streams on start; nothing here is a source of truth.
"""

from __future__ import annotations

from voltbus.schemas.rollouts import AttemptClaimed, RolloutStarted
from voltbus.schemas.spans import items_of
from voltbus.schemas.subjects import aggregate_of
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import RolloutState, decider

from .watchdog import Claim, Verdict, WorkerLife, check, check_worker, observe

Due = tuple[str, str, Verdict]
"""(rollout id, attempt id, verdict) of an attempt to expire."""


class Tracker:
    """Unfinished rollouts and last-seen times, fed event by event."""

    def __init__(self) -> None:
        self.rollouts: dict[str, RolloutState] = {}
        self.last_seen: dict[tuple[str, str], float] = {}
        self.claims: dict[tuple[str, str], Claim] = {}
        self.workers: dict[str, WorkerLife] = {}

    def apply_control(self, env: Envelope) -> tuple[RolloutState, RolloutState] | None:
        """Fold one control event; return the rollout's (before, after), or None if it is not a rollout's."""
        event = env.event
        if isinstance(event, WorkerStatusReported):
            self.workers[event.worker_id] = observe(
                self.workers.get(event.worker_id, WorkerLife()), event, env.seq, env.time
            )
        rollout_id = aggregate_of(event)
        if rollout_id is None:
            return None
        if isinstance(event, AttemptClaimed | RolloutStarted):
            self.claims[(rollout_id, event.attempt_id)] = Claim(env.seq, env.time)
        before = self.rollouts.get(rollout_id, decider.initial_state())
        after = decider.fold(before, event, env.subject)  # type: ignore[arg-type]
        if after.status is None or decider.is_terminal(after):
            self.rollouts.pop(rollout_id, None)
            for attempt in after.attempts:
                self.last_seen.pop((rollout_id, attempt.attempt_id), None)
                self.claims.pop((rollout_id, attempt.attempt_id), None)
        else:
            self.rollouts[rollout_id] = after
        return before, after

    def apply_span(self, env: Envelope) -> None:
        """Note the signs of life (every event on the spans stream is one) of attempts of unfinished rollouts, at
        the server's receive time."""
        for event in items_of(env.event):  # type: ignore[arg-type]
            if event.rollout_id in self.rollouts:
                key = (event.rollout_id, event.attempt_id)
                self.last_seen[key] = max(self.last_seen.get(key, 0.0), env.time)

    def due(self, now: float) -> list[Due]:
        """Every (rollout, attempt, verdict) whose latest attempt broke a limit at ``now``."""
        found = []
        for rollout_id, state in self.rollouts.items():
            if state.latest is None:
                continue
            verdict = check(state, self.last_seen.get((rollout_id, state.latest.attempt_id)), now)
            if verdict is not None:
                found.append((rollout_id, state.latest.attempt_id, verdict))
        return found

    def lost(self, now: float | None = None, timeout: float = 0.0, since: float = 0.0) -> list[Due]:
        """Every latest attempt whose worker is gone (``watchdog.check_worker``): orphaned by a new session of its
        worker and, with ``now`` (server time), silent for ``timeout`` seconds counted from ``since``."""
        found = []
        for rollout_id, state in self.rollouts.items():
            attempt = state.latest
            if attempt is None or attempt.worker_id is None:
                continue
            key = (rollout_id, attempt.attempt_id)
            life, claim, seen = self.workers.get(attempt.worker_id), self.claims.get(key), self.last_seen.get(key)
            verdict = check_worker(state, life, claim, seen, now, timeout, since)
            if verdict is not None:
                found.append((rollout_id, attempt.attempt_id, verdict))
        return found

    def oldest_active_start(self) -> float | None:
        """Start time of the oldest attempt in progress (where the spans replay must begin)."""
        starts = [
            s.latest.start_time for s in self.rollouts.values() if s.latest and s.status in ("preparing", "running")
        ]
        return min(starts) if starts else None
