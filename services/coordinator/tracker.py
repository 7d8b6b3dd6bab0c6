"""The coordinator's view of the log: every unfinished rollout (folded with the lifecycle's evolve)
and the last sign of life of each attempt (spans, model calls, rewards, heartbeats).

It is rebuilt from the streams on start; nothing here is a source of truth.
"""

from __future__ import annotations

from voltbus.schemas.spans import items_of
from voltbus.schemas.subjects import aggregate_of
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import RolloutState, decider

from .watchdog import Verdict, check


class Tracker:
    """Unfinished rollouts and last-seen times, fed event by event."""

    def __init__(self) -> None:
        self.rollouts: dict[str, RolloutState] = {}
        self.last_seen: dict[tuple[str, str], float] = {}

    def apply_control(self, env: Envelope) -> tuple[RolloutState, RolloutState] | None:
        """Fold one control event; return the rollout's (before, after), or None if it is not a rollout's."""
        rollout_id = aggregate_of(env.event)
        if rollout_id is None:
            return None
        before = self.rollouts.get(rollout_id, decider.initial_state())
        after = decider.evolve(before, env.event)  # type: ignore[arg-type]
        if after.status is None or decider.is_terminal(after):
            self.rollouts.pop(rollout_id, None)
            for attempt in after.attempts:
                self.last_seen.pop((rollout_id, attempt.attempt_id), None)
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

    def due(self, now: float) -> list[tuple[str, str, Verdict]]:
        """Every (rollout, attempt, verdict) whose latest attempt broke a limit at ``now``."""
        found = []
        for rollout_id, state in self.rollouts.items():
            if state.latest is None:
                continue
            verdict = check(state, self.last_seen.get((rollout_id, state.latest.attempt_id)), now)
            if verdict is not None:
                found.append((rollout_id, state.latest.attempt_id, verdict))
        return found

    def oldest_active_start(self) -> float | None:
        """Start time of the oldest attempt in progress (where the spans replay must begin)."""
        starts = [
            s.latest.start_time for s in self.rollouts.values() if s.latest and s.status in ("preparing", "running")
        ]
        return min(starts) if starts else None
