"""The rollout decider, one rule per test: given these events, when this command, then these events (R26).

Given events are written by hand with fixed ids; expected events use ``ANY`` for the derived event id.
Where a test checks the resulting state, it folds the events through ``evolve``.
"""

from __future__ import annotations

from typing import Literal
from unittest.mock import ANY

import msgspec
import pytest

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
    AttemptStatus,
    AttemptSucceeded,
    AttemptTimedOut,
    AttemptUpdated,
    ErrorInfo,
    RolloutCancelled,
    RolloutConfig,
    RolloutEvent,
    RolloutFailed,
    RolloutQueued,
    RolloutRequeued,
    RolloutStarted,
    RolloutUpdated,
)
from voltbus.services.lifecycle.decider import RULES, decide, evolve, initial_state, is_terminal
from voltbus.services.lifecycle.state import AttemptState, RolloutState

R = "ro-1"
INPUT = msgspec.Raw(b'{"question": "2+2"}')
BOOM = ErrorInfo(type="ValueError", message="boom")
ONCE = RolloutConfig()
RETRY = RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout", "unresponsive"], timeout_seconds=60.0)
T0, T1, T2, T3 = 100.0, 101.0, 102.0, 103.0


def fold(events: list[RolloutEvent]) -> RolloutState:
    """The state a history folds into, from the rollout that does not exist yet."""
    state = initial_state()
    for event in events:
        state = evolve(state, event)
    return state


def latest(state: RolloutState) -> AttemptState:
    """The latest attempt, which the test expects to exist."""
    assert state.latest is not None
    return state.latest


# Given: events with fixed ids.


def queued(config: RolloutConfig = ONCE) -> RolloutQueued:
    return RolloutQueued(event_id="ev-queued", rollout_id=R, input=INPUT, mode="train", config=config, queued_at=T0)


def started(config: RolloutConfig = ONCE) -> RolloutStarted:
    return RolloutStarted(event_id="ev-started", rollout_id=R, input=INPUT, config=config, attempt_id="at-1", at=T0)


def claimed(attempt_id: str = "at-1", sequence_id: int = 1, dispatch: str | None = "ev-queued") -> AttemptClaimed:
    return AttemptClaimed(
        event_id=f"ev-claimed-{attempt_id}",
        rollout_id=R,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        worker_id="w-1",
        at=T1,
        dispatch_event_id=dispatch,
    )


def running(attempt_id: str = "at-1") -> AttemptStarted:
    return AttemptStarted(event_id=f"ev-running-{attempt_id}", rollout_id=R, attempt_id=attempt_id, at=T1)


def succeeded(attempt_id: str = "at-1") -> AttemptSucceeded:
    return AttemptSucceeded(event_id=f"ev-succeeded-{attempt_id}", rollout_id=R, attempt_id=attempt_id, at=T2)


def failed(attempt_id: str = "at-1") -> AttemptFailed:
    return AttemptFailed(event_id=f"ev-failed-{attempt_id}", rollout_id=R, attempt_id=attempt_id, error=BOOM, at=T2)


def requeued(attempt_id: str = "at-1", status: AttemptStatus = "failed") -> RolloutRequeued:
    return RolloutRequeued(
        event_id=f"ev-requeued-{attempt_id}",
        rollout_id=R,
        attempt_id=attempt_id,
        attempt_status=status,
        at=T2,
    )


def rollout_failed(attempt_id: str | None = "at-1") -> RolloutFailed:
    return RolloutFailed(event_id="ev-rollout-failed", rollout_id=R, attempt_id=attempt_id, reason="boom", at=T2)


def cancelled() -> RolloutCancelled:
    return RolloutCancelled(event_id="ev-cancelled", rollout_id=R, reason="user", at=T3)


# When: commands.


def queue(config: RolloutConfig = ONCE, at: float = T0) -> QueueRollout:
    return QueueRollout(rollout_id=R, input=INPUT, mode="train", config=config, at=at)


def start(config: RolloutConfig = ONCE) -> StartRollout:
    return StartRollout(rollout_id=R, attempt_id="at-1", input=INPUT, config=config, worker_id="w-1", at=T0)


def claim(attempt_id: str = "at-1", dispatch: str = "ev-queued", start: bool = False) -> ClaimRollout:
    return ClaimRollout(
        rollout_id=R, attempt_id=attempt_id, dispatch_event_id=dispatch, worker_id="w-1", at=T1, start=start
    )


def finish(
    attempt_id: str = "at-1", status: Literal["succeeded", "failed"] = "failed", error: ErrorInfo | None = BOOM
) -> FinishAttempt:
    return FinishAttempt(rollout_id=R, attempt_id=attempt_id, status=status, error=error, at=T2)


def expire(attempt_id: str = "at-1", status: Literal["timeout", "unresponsive"] = "timeout") -> ExpireAttempt:
    return ExpireAttempt(rollout_id=R, attempt_id=attempt_id, status=status, last_heartbeat_at=T1, at=T3)


def mark_running(attempt_id: str = "at-1") -> MarkAttemptRunning:
    return MarkAttemptRunning(rollout_id=R, attempt_id=attempt_id, at=T2)


def cancel() -> CancelRollout:
    return CancelRollout(rollout_id=R, reason="user", at=T3)


def park() -> ParkRollout:
    return ParkRollout(rollout_id=R, reason="max deliveries", at=T3)


# Create.


def test_queue_creates_a_queued_rollout() -> None:
    assert decide(queue(), fold([])) == [
        RolloutQueued(event_id=ANY, rollout_id=R, input=INPUT, mode="train", config=ONCE, queued_at=T0, rules=RULES)
    ]


def test_a_queued_rollout_waits_for_a_claim_of_its_queued_event() -> None:
    state = fold([queued()])
    assert (state.status, state.attempts, state.dispatch_event_id, state.start_time) == ("queuing", (), "ev-queued", T0)


def test_start_creates_a_rollout_with_attempt_1_claimed() -> None:
    assert decide(start(), fold([])) == [
        RolloutStarted(
            event_id=ANY, rollout_id=R, input=INPUT, config=ONCE, attempt_id="at-1", worker_id="w-1", at=T0, rules=RULES
        )
    ]


def test_a_started_rollout_is_preparing_attempt_1_outside_the_queue() -> None:
    state = fold(decide(start(), fold([])))
    assert (state.status, state.dispatch_event_id) == ("preparing", None)
    assert state.attempts == (AttemptState(attempt_id="at-1", sequence_id=1, worker_id="w-1", start_time=T0),)


@pytest.mark.parametrize("create", [queue(), start()], ids=["queue", "start"])
def test_a_repeated_create_is_a_no_op(create: RolloutCommand) -> None:
    given = decide(create, fold([]))
    assert decide(create, fold(given)) == []


def test_a_different_create_of_an_existing_rollout_is_refused() -> None:
    given = decide(queue(), fold([]))
    with pytest.raises(IllegalTransition):
        decide(queue(at=T1), fold(given))
    with pytest.raises(IllegalTransition):
        decide(start(), fold(given))


def test_event_ids_derive_from_the_whole_command() -> None:
    assert decide(queue(), fold([])) == decide(queue(), fold([]))
    assert decide(queue(), fold([]))[0].event_id != decide(queue(at=T1), fold([]))[0].event_id


# Claim.


def test_a_claim_of_a_queued_rollout_opens_attempt_1() -> None:
    assert decide(claim(), fold([queued()])) == [
        AttemptClaimed(
            event_id=ANY,
            rollout_id=R,
            attempt_id="at-1",
            sequence_id=1,
            worker_id="w-1",
            at=T1,
            dispatch_event_id="ev-queued",
        )
    ]


def test_a_claimed_rollout_is_preparing_and_has_nothing_left_to_claim() -> None:
    state = fold([queued(), claimed()])
    assert (state.status, state.dispatch_event_id) == ("preparing", None)
    assert state.attempts == (AttemptState(attempt_id="at-1", sequence_id=1, worker_id="w-1", start_time=T1),)


def test_a_claim_that_starts_the_agent_opens_the_attempt_running_in_one_event() -> None:
    events = decide(claim(start=True), fold([queued()]))
    assert [(type(e).__name__, getattr(e, "running", None)) for e in events] == [("AttemptClaimed", True)]
    state = fold([queued(), *events])
    assert (state.status, state.dispatch_event_id) == ("running", None)
    assert state.attempts == (
        AttemptState(
            attempt_id="at-1", sequence_id=1, status="running", worker_id="w-1", start_time=T1, last_heartbeat_time=T1
        ),
    )
    assert decide(mark_running(), state) == []  # already running: nothing more to record


def test_a_claim_of_a_requeued_rollout_opens_the_next_attempt() -> None:
    given = [queued(RETRY), claimed(), failed(), requeued()]
    assert decide(claim("at-2", "ev-requeued-at-1"), fold(given)) == [
        AttemptClaimed(
            event_id=ANY,
            rollout_id=R,
            attempt_id="at-2",
            sequence_id=2,
            worker_id="w-1",
            at=T1,
            dispatch_event_id="ev-requeued-at-1",
        )
    ]


def test_a_claim_naming_a_stale_dispatch_is_refused() -> None:
    given = [queued(RETRY), claimed(), failed(), requeued()]
    with pytest.raises(IllegalTransition):
        decide(claim("at-2", "ev-queued"), fold(given))


def test_a_claim_of_a_rollout_already_claimed_is_refused() -> None:
    with pytest.raises(IllegalTransition):
        decide(claim("at-2"), fold([queued(), claimed()]))


def test_a_repeated_claim_is_a_no_op() -> None:
    assert decide(claim(), fold([queued(), claimed()])) == []


def test_a_claim_naming_an_earlier_attempt_is_a_no_op() -> None:
    given = [queued(RETRY), claimed(), claimed("at-2", 2, dispatch=None), failed("at-2"), requeued("at-2")]
    assert decide(claim("at-1", "ev-requeued-at-2"), fold(given)) == []


def test_a_claim_of_a_finished_rollout_is_refused() -> None:
    with pytest.raises(IllegalTransition):
        decide(claim("at-2"), fold([queued(), cancelled()]))


# StartAttempt.


def test_start_attempt_opens_the_next_attempt_without_a_dispatch_and_past_max_attempts() -> None:
    cmd = StartAttempt(rollout_id=R, attempt_id="at-2", worker_id="w-2", at=T2)
    assert decide(cmd, fold([queued(ONCE), claimed()])) == [
        AttemptClaimed(event_id=ANY, rollout_id=R, attempt_id="at-2", sequence_id=2, worker_id="w-2", at=T2)
    ]


def test_start_attempt_on_a_queued_rollout_makes_its_queued_event_stale() -> None:
    cmd = StartAttempt(rollout_id=R, attempt_id="at-1", at=T1)
    state = fold([queued(), *decide(cmd, fold([queued()]))])
    assert (state.status, state.dispatch_event_id, latest(state).sequence_id) == ("preparing", None, 1)
    with pytest.raises(IllegalTransition):
        decide(claim("at-2"), state)


def test_start_attempt_leaves_the_previous_attempt_alone() -> None:
    state = fold([queued(), claimed(), running(), claimed("at-2", 2, dispatch=None)])
    assert [(a.attempt_id, a.status) for a in state.attempts] == [("at-1", "running"), ("at-2", "preparing")]
    assert state.status == "preparing"


def test_start_attempt_on_a_finished_rollout_is_refused() -> None:
    with pytest.raises(IllegalTransition):
        decide(StartAttempt(rollout_id=R, attempt_id="at-2", at=T3), fold([queued(), claimed(), succeeded()]))


# MarkAttemptRunning.


def test_mark_running_moves_a_preparing_attempt_to_running() -> None:
    assert decide(mark_running(), fold([queued(), claimed()])) == [
        AttemptStarted(event_id=ANY, rollout_id=R, attempt_id="at-1", at=T2)
    ]


def test_a_running_attempt_runs_its_rollout_and_records_the_heartbeat() -> None:
    state = fold([queued(), claimed(), running()])
    last = latest(state)
    assert (state.status, last.status, last.last_heartbeat_time) == ("running", "running", T1)


def test_mark_running_again_is_a_no_op() -> None:
    assert decide(mark_running(), fold([queued(), claimed(), running()])) == []


def test_a_late_span_does_not_revive_a_failed_attempt_of_a_requeued_rollout() -> None:
    assert decide(mark_running(), fold([queued(RETRY), claimed(), failed(), requeued()])) == []


def test_a_late_span_does_not_revive_an_unresponsive_attempt() -> None:
    given = [queued(RETRY), claimed(), *decide(expire(status="unresponsive"), fold([queued(RETRY), claimed()]))]
    assert decide(mark_running(), fold(given)) == []


# FinishAttempt.


def test_success_of_the_latest_attempt_succeeds_the_attempt() -> None:
    assert decide(finish(status="succeeded"), fold([queued(), claimed(), running()])) == [
        AttemptSucceeded(event_id=ANY, rollout_id=R, attempt_id="at-1", at=T2)
    ]


def test_a_successful_attempt_ends_the_rollout_as_succeeded() -> None:
    state = fold([queued(), claimed(), running(), succeeded()])
    assert (state.status, state.end_time) == ("succeeded", T2)
    last = latest(state)
    assert (last.status, last.end_time) == ("succeeded", T2)


def test_failure_without_a_retry_policy_fails_the_rollout() -> None:
    assert decide(finish(), fold([queued(ONCE), claimed()])) == [
        AttemptFailed(event_id=ANY, rollout_id=R, attempt_id="at-1", error=BOOM, at=T2),
        RolloutFailed(event_id=ANY, rollout_id=R, attempt_id="at-1", reason="ValueError: boom", at=T2),
    ]


def test_failure_with_attempts_left_requeues_the_rollout() -> None:
    assert decide(finish(), fold([queued(RETRY), claimed()])) == [
        AttemptFailed(event_id=ANY, rollout_id=R, attempt_id="at-1", error=BOOM, at=T2),
        RolloutRequeued(
            event_id=ANY, rollout_id=R, attempt_id="at-1", attempt_status="failed", reason="ValueError: boom", at=T2
        ),
    ]


def test_failure_not_in_the_retry_condition_fails_the_rollout() -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["timeout"])
    assert [type(e) for e in decide(finish(), fold([queued(config), claimed()]))] == [AttemptFailed, RolloutFailed]


def test_failure_of_the_last_allowed_attempt_fails_the_rollout() -> None:
    given = [queued(RETRY), claimed(), failed(), requeued(), claimed("at-2", 2, "ev-requeued-at-1")]
    given += [failed("at-2"), requeued("at-2"), claimed("at-3", 3, "ev-requeued-at-2")]
    assert decide(finish("at-3"), fold(given)) == [
        AttemptFailed(event_id=ANY, rollout_id=R, attempt_id="at-3", error=BOOM, at=T2),
        RolloutFailed(event_id=ANY, rollout_id=R, attempt_id="at-3", reason="ValueError: boom", at=T2),
    ]


def test_max_attempts_3_with_retry_on_failed_runs_attempts_1_to_3_then_fails() -> None:
    config = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    events = decide(queue(config), fold([]))
    for n in (1, 2, 3):
        state = fold(events)
        assert state.status in ("queuing", "requeuing")
        events += decide(claim(f"at-{n}", state.dispatch_event_id or ""), state)
        events += decide(finish(f"at-{n}"), fold(events))
    state = fold(events)
    assert (state.status, state.end_time, state.dispatch_event_id) == ("failed", T2, None)
    assert [(a.sequence_id, a.status) for a in state.attempts] == [(1, "failed"), (2, "failed"), (3, "failed")]


def test_a_failure_without_error_info_gets_a_generic_one() -> None:
    events = decide(finish(error=None), fold([queued(), claimed()]))
    assert events[0] == AttemptFailed(
        event_id=ANY,
        rollout_id=R,
        attempt_id="at-1",
        error=ErrorInfo(type="Error", message="the attempt failed"),
        at=T2,
    )


def test_a_failed_attempt_records_its_error_and_end_time() -> None:
    state = fold([queued(RETRY), claimed(), failed(), requeued()])
    assert (state.status, state.end_time, state.dispatch_event_id) == ("requeuing", None, "ev-requeued-at-1")
    last = latest(state)
    assert (last.status, last.error, last.end_time) == ("failed", BOOM, T2)


def test_a_repeated_finish_is_a_no_op() -> None:
    assert decide(finish(), fold([queued(RETRY), claimed(), failed(), requeued()])) == []


def test_finishing_an_ended_attempt_differently_is_refused() -> None:
    with pytest.raises(IllegalTransition):
        decide(finish(status="succeeded"), fold([queued(RETRY), claimed(), failed(), requeued()]))


def test_finishing_a_non_latest_attempt_records_only_the_attempt() -> None:
    given = [queued(), claimed(), claimed("at-2", 2, dispatch=None)]
    assert decide(finish("at-1"), fold(given)) == [
        AttemptFailed(event_id=ANY, rollout_id=R, attempt_id="at-1", error=BOOM, at=T2)
    ]
    state = fold([*given, failed("at-1")])
    assert (state.status, [a.status for a in state.attempts]) == ("preparing", ["failed", "preparing"])


def test_a_non_latest_success_does_not_succeed_the_rollout() -> None:
    state = fold([queued(), claimed(), claimed("at-2", 2, dispatch=None), succeeded("at-1")])
    assert (state.status, state.end_time, state.attempts[0].status) == ("preparing", None, "succeeded")


def test_finishing_a_stray_attempt_of_a_finished_rollout_is_refused() -> None:
    given = [queued(), claimed(), claimed("at-2", 2, dispatch=None), cancelled()]
    with pytest.raises(IllegalTransition):
        decide(finish("at-1", status="succeeded"), fold(given))


# ExpireAttempt (the watchdog).


def test_a_timeout_with_attempts_left_requeues_the_rollout() -> None:
    assert decide(expire(), fold([queued(RETRY), claimed(), running()])) == [
        AttemptTimedOut(event_id=ANY, rollout_id=R, attempt_id="at-1", timeout_seconds=60.0, at=T3),
        RolloutRequeued(
            event_id=ANY, rollout_id=R, attempt_id="at-1", attempt_status="timeout", reason="attempt timeout", at=T3
        ),
    ]


def test_an_unresponsive_attempt_without_retry_fails_the_rollout() -> None:
    assert decide(expire(status="unresponsive"), fold([queued(ONCE), claimed()])) == [
        AttemptMarkedUnresponsive(event_id=ANY, rollout_id=R, attempt_id="at-1", last_heartbeat_at=T1, at=T3),
        RolloutFailed(event_id=ANY, rollout_id=R, attempt_id="at-1", reason="attempt unresponsive", at=T3),
    ]


@pytest.mark.parametrize("status", ["timeout", "unresponsive"])
def test_an_expired_attempt_gets_an_end_time(status: Literal["timeout", "unresponsive"]) -> None:
    given = [queued(RETRY), claimed()]
    state = fold([*given, *decide(expire(status=status), fold(given))])
    last = latest(state)
    assert (state.status, last.status, last.end_time) == ("requeuing", status, T3)


def test_expiring_an_attempt_that_already_ended_is_a_no_op() -> None:
    assert decide(expire(), fold([queued(RETRY), claimed(), failed(), requeued()])) == []


def test_expiring_a_non_latest_attempt_is_a_no_op() -> None:
    assert decide(expire("at-1"), fold([queued(RETRY), claimed(), claimed("at-2", 2, dispatch=None)])) == []


# CancelRollout and ParkRollout.


def test_cancel_of_a_running_rollout_cancels_it() -> None:
    assert decide(cancel(), fold([queued(), claimed(), running()])) == [
        RolloutCancelled(event_id=ANY, rollout_id=R, reason="user", at=T3)
    ]


def test_cancel_ends_the_running_attempt_as_failed() -> None:
    state = fold([queued(), claimed(), running(), cancelled()])
    assert (state.status, state.end_time, state.reason) == ("cancelled", T3, "user")
    assert state.latest == AttemptState(
        attempt_id="at-1",
        sequence_id=1,
        status="failed",
        worker_id="w-1",
        start_time=T1,
        end_time=T3,
        last_heartbeat_time=T1,
        error=ErrorInfo(type="Cancelled", message="user"),
    )


def test_cancel_of_a_queued_rollout_leaves_nothing_to_claim() -> None:
    state = fold([queued(), cancelled()])
    assert (state.status, state.dispatch_event_id, state.attempts) == ("cancelled", None, ())


@pytest.mark.parametrize("ending", [succeeded(), failed()], ids=["succeeded", "failed"])
def test_cancel_of_a_finished_rollout_is_refused(ending: RolloutEvent) -> None:
    with pytest.raises(IllegalTransition):
        decide(cancel(), fold([queued(), claimed(), ending, rollout_failed()]))


def test_a_repeated_cancel_is_a_no_op() -> None:
    assert decide(cancel(), fold([queued(), cancelled()])) == []


def test_park_fails_a_queued_rollout() -> None:
    assert decide(park(), fold([queued()])) == [
        RolloutFailed(event_id=ANY, rollout_id=R, reason="max deliveries", at=T3)
    ]


def test_park_ends_the_active_attempt_as_failed() -> None:
    parked = RolloutFailed(event_id="ev-parked", rollout_id=R, reason="max deliveries", at=T3)
    state = fold([queued(), claimed(), parked])
    assert (state.status, state.end_time, state.dispatch_event_id) == ("failed", T3, None)
    last = latest(state)
    assert (last.status, last.end_time) == ("failed", T3)


@pytest.mark.parametrize("ending", [cancelled(), rollout_failed(None)], ids=["cancelled", "failed"])
def test_park_of_a_finished_rollout_is_a_no_op(ending: RolloutEvent) -> None:
    assert decide(park(), fold([queued(), ending])) == []


def test_park_by_a_dead_dispatch_message_that_was_claimed_meanwhile_is_a_no_op() -> None:
    stale = ParkRollout(rollout_id=R, reason="max deliveries", dispatch_event_id="ev-queued", at=T3)
    assert decide(stale, fold([queued(), claimed()])) == []  # the claim went through: the rollout runs on
    assert decide(stale, fold([queued()])) != []  # still that message's queue entry: parked


# UpdateRollout and UpdateAttempt.


def test_update_rollout_carries_only_the_fields_given() -> None:
    cmd = UpdateRollout(rollout_id=R, metadata={"tag": msgspec.Raw(b'"x"')}, at=T1)
    assert decide(cmd, fold([queued()])) == [
        RolloutUpdated(event_id=ANY, rollout_id=R, metadata={"tag": msgspec.Raw(b'"x"')}, at=T1)
    ]


def test_unset_fields_keep_their_value() -> None:
    update = RolloutUpdated(event_id="ev-upd", rollout_id=R, resources_id="res-2", at=T1)
    state = fold([queued(RETRY), update])
    assert (state.mode, state.config, state.resources_id) == ("train", RETRY, "res-2")


def test_update_rollout_can_set_a_field_to_none() -> None:
    state = fold([queued(), RolloutUpdated(event_id="ev-upd", rollout_id=R, mode=None, at=T1)])
    assert state.mode is None


def test_update_attempt_changes_only_the_fields_given() -> None:
    cmd = UpdateAttempt(rollout_id=R, attempt_id="at-1", worker_id="w-9", at=T2)
    events = decide(cmd, fold([queued(), claimed()]))
    assert events == [AttemptUpdated(event_id=ANY, rollout_id=R, attempt_id="at-1", worker_id="w-9", at=T2)]
    assert fold([queued(), claimed(), *events]).latest == AttemptState(
        attempt_id="at-1", sequence_id=1, worker_id="w-9", start_time=T1
    )


@pytest.mark.parametrize(
    "cmd",
    [
        UpdateRollout(rollout_id=R, mode="train", at=T1),
        UpdateRollout(rollout_id=R, at=T1),
        UpdateAttempt(rollout_id=R, attempt_id="at-1", worker_id="w-1", at=T1),
    ],
    ids=["same-value", "all-unset", "same-worker"],
)
def test_an_update_that_changes_nothing_is_a_no_op(cmd: RolloutCommand) -> None:
    assert decide(cmd, fold([queued(), claimed()])) == []


def test_updates_are_recorded_on_a_finished_rollout() -> None:
    updates = [
        RolloutUpdated(event_id="ev-upd", rollout_id=R, metadata={"score": msgspec.Raw(b"1")}, at=T3),
        AttemptUpdated(event_id="ev-upd-at", rollout_id=R, attempt_id="at-1", worker_id="w-2", at=T3),
    ]
    state = fold([queued(), claimed(), succeeded(), *updates])
    assert (state.status, state.metadata, latest(state).worker_id) == ("succeeded", {"score": msgspec.Raw(b"1")}, "w-2")


# Unknown ids.

ON_EXISTING_ROLLOUT = [
    claim(),
    StartAttempt(rollout_id=R, attempt_id="at-1", at=T1),
    mark_running(),
    finish(),
    expire(),
    cancel(),
    park(),
    UpdateRollout(rollout_id=R, mode="val", at=T1),
    UpdateAttempt(rollout_id=R, attempt_id="at-1", worker_id="w-2", at=T1),
]


@pytest.mark.parametrize("cmd", ON_EXISTING_ROLLOUT, ids=lambda c: type(c).__name__)
def test_a_command_on_an_unknown_rollout_is_refused(cmd: RolloutCommand) -> None:
    with pytest.raises(UnknownRollout):
        decide(cmd, fold([]))


@pytest.mark.parametrize(
    "cmd",
    [
        mark_running("at-9"),
        finish("at-9"),
        expire("at-9"),
        UpdateAttempt(rollout_id=R, attempt_id="at-9", worker_id="w-2", at=T1),
    ],
    ids=lambda c: type(c).__name__,
)
def test_a_command_on_an_unknown_attempt_is_refused(cmd: RolloutCommand) -> None:
    with pytest.raises(UnknownAttempt):
        decide(cmd, fold([queued(), claimed()]))


# evolve on its own.


def test_events_before_the_rollout_exists_are_ignored() -> None:
    assert fold([claimed(), running(), cancelled()]) == initial_state()


def test_a_terminal_rollout_absorbs_every_later_event() -> None:
    finished = [queued(RETRY), claimed(), succeeded()]
    later = [failed(), requeued(), claimed("at-2", 2), running("at-2"), cancelled(), rollout_failed(), queued()]
    assert fold([*finished, *later]) == fold(finished)


@pytest.mark.parametrize(
    ("given", "terminal"),
    [
        ([], False),
        ([queued()], False),
        ([queued(), claimed()], False),
        ([queued(RETRY), claimed(), failed(), requeued()], False),
        ([queued(), claimed(), succeeded()], True),
        ([queued(), claimed(), failed(), rollout_failed()], True),
        ([queued(), cancelled()], True),
    ],
    ids=["absent", "queuing", "preparing", "requeuing", "succeeded", "failed", "cancelled"],
)
def test_only_succeeded_failed_and_cancelled_are_terminal(given: list[RolloutEvent], terminal: bool) -> None:
    assert is_terminal(fold(given)) is terminal
