"""The rollout decider under random command sequences: a Hypothesis state machine over a few rollouts (R26).

Ids come from small pools so that unknown rollouts, unknown attempts, reused attempt ids and stale
dispatch claims all happen. Every step checks the per-command properties; the invariants check the
state each rollout reached.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

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
from voltbus.schemas.errors import InvalidCommand, UnknownAttempt, UnknownRollout
from voltbus.schemas.rollouts import ErrorInfo, RolloutConfig, RolloutEvent
from voltbus.services.lifecycle.decider import decide, evolve, initial_state, is_terminal
from voltbus.services.lifecycle.state import ACTIVE_ATTEMPT, QUEUED_ROLLOUT, RolloutState, retry_status

ROLLOUTS = st.sampled_from(["ro-1", "ro-2", "ro-3"])
"""ro-1 and ro-2 exist from the start; ro-3 only once a create draws it."""
NEW_ATTEMPT = st.sampled_from([None, None, None, "at-1", "at-2"])
"""The id a claim or start gives its attempt: mostly a fresh one (None), sometimes one already used."""
TIMES = st.sampled_from([1.0, 2.0, 3.0])
WORKERS = st.sampled_from([None, "w-1", "w-2"])
CONFIGS = st.sampled_from(
    [
        RolloutConfig(),
        RolloutConfig(max_attempts=3, retry_condition=["failed"]),
        RolloutConfig(max_attempts=2, retry_condition=["timeout", "unresponsive"], timeout_seconds=5.0),
        RolloutConfig(max_attempts=4, retry_condition=["failed", "timeout", "unresponsive"]),
        RolloutConfig(max_attempts=4, retry_condition=["failed", "timeout", "unresponsive"]),
    ]
)
METADATA = st.sampled_from([{}, {"k": msgspec.Raw(b"1")}, {"k": msgspec.Raw(b'"v"')}])
ERRORS = st.sampled_from([None, ErrorInfo(type="ValueError", message="boom")])
UNSET = msgspec.UNSET
Finished = Literal["succeeded", "failed"]
Expired = Literal["timeout", "unresponsive"]
WHICH = st.sampled_from([-1, -1, -1, 0, 1, 2, 5])
"""Which attempt a command names: mostly the latest, sometimes an older one or one that does not exist."""
DISPATCH = st.sampled_from([-1, -1, -1, 0, 1, 2, -2])
"""Which dispatch id a claim names: mostly the current one, sometimes a stale or a bogus one."""
RARELY = st.integers(0, 3)
"""Commands that end a rollout run only when this draws 0, so that rollouts live long enough to retry."""


def fold(events: list[RolloutEvent]) -> RolloutState:
    return evolve_all(initial_state(), events)


def evolve_all(state: RolloutState, events: list[RolloutEvent]) -> RolloutState:
    for event in events:
        state = evolve(state, event)
    return state


def unknown_id_error(cmd: RolloutCommand, state: RolloutState) -> type[InvalidCommand] | None:
    """The error ``cmd`` must raise because it names a rollout or attempt that does not exist."""
    if state.status is None and not isinstance(cmd, QueueRollout | StartRollout):
        return UnknownRollout
    by_attempt = MarkAttemptRunning | FinishAttempt | ExpireAttempt | UpdateAttempt
    if isinstance(cmd, by_attempt) and state.attempt(cmd.attempt_id) is None:
        return UnknownAttempt
    return None


class RolloutMachine(RuleBasedStateMachine):
    """A few rollouts driven by random commands; the history of each is kept to re-fold."""

    def __init__(self) -> None:
        super().__init__()
        self.states: dict[str, RolloutState] = {}
        self.history: dict[str, list[RolloutEvent]] = {}
        self.dispatches: dict[str, list[str]] = {}
        self.event_ids: set[str] = set()
        self.accepted: list[RolloutCommand] = []
        self.fresh = 0

    def state(self, rollout_id: str) -> RolloutState:
        return self.states.get(rollout_id, initial_state())

    def apply(self, cmd: RolloutCommand) -> None:
        """Decide and evolve one command, checking what must hold for every single step."""
        before = self.state(cmd.rollout_id)
        unknown = unknown_id_error(cmd, before)
        try:
            events = decide(cmd, before)
        except InvalidCommand as error:  # refused: nothing appended; any other exception fails the test
            assert unknown is None or isinstance(error, unknown), f"{cmd} should raise {unknown.__name__}"
            return
        assert unknown is None, f"{cmd} names an unknown id but was accepted"
        after = before
        for event in events:
            assert event.rollout_id == cmd.rollout_id
            if event.event_id in self.event_ids:
                # The bus drops a message id it already stored: only a re-sent identical command may do that.
                assert cmd in self.accepted, f"{cmd} reuses the id of a stored event: {event}"
                continue
            self.event_ids.add(event.event_id)
            self.history.setdefault(cmd.rollout_id, []).append(event)
            after = evolve(after, event)
        if is_terminal(before):
            assert after.status == before.status, "a terminal rollout changed status"
        if events:
            self.accepted.append(cmd)
            assert evolve_all(before, events) != before, f"{cmd} produced events that change nothing: {events}"
            assert decide(cmd, evolve_all(before, events)) == [], f"repeating {cmd} is not idempotent"
        if isinstance(cmd, FinishAttempt | ExpireAttempt) and after.status != before.status:
            latest = after.latest
            assert latest is not None and latest.attempt_id == cmd.attempt_id
            if after.status in ("requeuing", "failed"):
                assert after.status == retry_status(latest.status, latest.sequence_id, after.config)
        self.states[cmd.rollout_id] = after
        seen = self.dispatches.setdefault(cmd.rollout_id, [])
        if after.dispatch_event_id is not None and after.dispatch_event_id not in seen:
            seen.append(after.dispatch_event_id)

    def new_attempt_id(self, drawn: str | None) -> str:
        self.fresh += 1
        return drawn or f"at-new{self.fresh}"

    @initialize(first=st.booleans(), second=st.booleans(), config1=CONFIGS, config2=CONFIGS)
    def two_rollouts(self, first: bool, second: bool, config1: RolloutConfig, config2: RolloutConfig) -> None:
        self.create("ro-1", first, None, config1, {}, 0.0)
        self.create("ro-2", second, None, config2, {}, 0.0)

    @rule(rid=ROLLOUTS, start=st.booleans(), aid=NEW_ATTEMPT, config=CONFIGS, meta=METADATA, at=TIMES)
    def create(self, rid: str, start: bool, aid: str | None, config: RolloutConfig, meta: dict, at: float) -> None:
        """Queue the rollout, or start it with attempt 1 already claimed."""
        fields = {"rollout_id": rid, "input": msgspec.Raw(b"{}"), "config": config, "metadata": meta, "at": at}
        cmd = StartRollout(attempt_id=aid or "at-1", **fields) if start else QueueRollout(**fields)
        self.apply(cmd)

    def attempt_id(self, rollout_id: str, which: int) -> str:
        """-1: the latest attempt, n: the n-th attempt; an unknown id when there is no such attempt."""
        attempts = self.state(rollout_id).attempts
        return attempts[which].attempt_id if -len(attempts) <= which < len(attempts) else "at-unknown"

    @rule(rid=ROLLOUTS, aid=NEW_ATTEMPT, which=DISPATCH, worker=WORKERS, at=TIMES, start=st.booleans())
    def claim(self, rid: str, aid: str | None, which: int, worker: str | None, at: float, start: bool) -> None:
        """which: -1 the current dispatch id, n >= 0 the n-th seen (often stale), else a bogus one."""
        seen = self.dispatches.get(rid, [])
        current = self.state(rid).dispatch_event_id
        if which == -1 and current is not None:
            dispatch = current
        elif 0 <= which < len(seen):
            dispatch = seen[which]
        else:
            dispatch = "ev-bogus"
        aid = self.new_attempt_id(aid)
        self.apply(
            ClaimRollout(
                rollout_id=rid, attempt_id=aid, dispatch_event_id=dispatch, worker_id=worker, at=at, start=start
            )
        )

    @rule(rid=ROLLOUTS, aid=NEW_ATTEMPT, worker=WORKERS, at=TIMES)
    def start_attempt(self, rid: str, aid: str | None, worker: str | None, at: float) -> None:
        self.apply(StartAttempt(rollout_id=rid, attempt_id=self.new_attempt_id(aid), worker_id=worker, at=at))

    @rule(rid=ROLLOUTS, which=WHICH, at=TIMES)
    def mark_running(self, rid: str, which: int, at: float) -> None:
        self.apply(MarkAttemptRunning(rollout_id=rid, attempt_id=self.attempt_id(rid, which), at=at))

    @rule(rid=ROLLOUTS, which=WHICH, status=st.sampled_from(["succeeded", "failed"]), error=ERRORS, at=TIMES)
    def finish(self, rid: str, which: int, status: Finished, error: ErrorInfo | None, at: float) -> None:
        aid = self.attempt_id(rid, which)
        self.apply(FinishAttempt(rollout_id=rid, attempt_id=aid, status=status, error=error, at=at))

    @rule(rid=ROLLOUTS, which=WHICH, status=st.sampled_from(["timeout", "unresponsive"]), at=TIMES)
    def expire(self, rid: str, which: int, status: Expired, at: float) -> None:
        aid = self.attempt_id(rid, which)
        self.apply(ExpireAttempt(rollout_id=rid, attempt_id=aid, status=status, last_heartbeat_at=at - 1, at=at))

    @rule(rid=ROLLOUTS, reason=st.sampled_from(["", "user"]), at=TIMES, roll=RARELY)
    def cancel(self, rid: str, reason: str, at: float, roll: int) -> None:
        if roll == 0:
            self.apply(CancelRollout(rollout_id=rid, reason=reason, at=at))

    @rule(rid=ROLLOUTS, at=TIMES, roll=RARELY)
    def park(self, rid: str, at: float, roll: int) -> None:
        if roll == 0:
            self.apply(ParkRollout(rollout_id=rid, reason="max deliveries", at=at))

    @rule(
        rid=ROLLOUTS,
        mode=st.sampled_from([UNSET, None, "train", "val"]),
        config=st.one_of(st.just(UNSET), CONFIGS),
        meta=st.one_of(st.just(UNSET), METADATA),
        at=TIMES,
    )
    def update_rollout(self, rid: str, mode: Any, config: Any, meta: Any, at: float) -> None:
        self.apply(UpdateRollout(rollout_id=rid, mode=mode, config=config, metadata=meta, at=at))

    @rule(
        rid=ROLLOUTS,
        which=WHICH,
        worker=st.one_of(st.just(UNSET), WORKERS),
        meta=st.one_of(st.just(UNSET), METADATA),
        at=TIMES,
    )
    def update_attempt(self, rid: str, which: int, worker: Any, meta: Any, at: float) -> None:
        aid = self.attempt_id(rid, which)
        self.apply(UpdateAttempt(rollout_id=rid, attempt_id=aid, worker_id=worker, metadata=meta, at=at))

    @invariant()
    def threaded_state_equals_fold(self) -> None:
        for rid, events in self.history.items():
            assert fold(events) == self.states[rid]

    @invariant()
    def sequence_ids_count_from_one(self) -> None:
        for state in self.states.values():
            assert [a.sequence_id for a in state.attempts] == list(range(1, len(state.attempts) + 1))
            assert len({a.attempt_id for a in state.attempts}) == len(state.attempts)

    @invariant()
    def latest_attempt_is_active_exactly_while_the_rollout_runs(self) -> None:
        for state in self.states.values():
            latest = state.latest
            if state.status in ("preparing", "running"):
                assert latest is not None and latest.status in ACTIVE_ATTEMPT
            else:
                assert latest is None or latest.status not in ACTIVE_ATTEMPT

    @invariant()
    def rollout_status_follows_the_latest_attempt(self) -> None:
        for state in self.states.values():
            latest = state.latest
            if state.status == "queuing":
                assert latest is None
            elif state.status in ("preparing", "running", "succeeded"):
                assert latest is not None and state.status == latest.status
            elif state.status == "requeuing":
                assert latest is not None and latest.status not in ACTIVE_ATTEMPT
            assert (state.dispatch_event_id is not None) == (state.status in QUEUED_ROLLOUT)

    @invariant()
    def ended_attempts_have_an_end_time(self) -> None:
        for state in self.states.values():
            for attempt in state.attempts:
                assert (attempt.end_time is None) == (attempt.status in ACTIVE_ATTEMPT)


TestRolloutMachine = RolloutMachine.TestCase
TestRolloutMachine.settings = settings(
    max_examples=300, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
