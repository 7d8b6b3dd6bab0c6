"""A step's rollouts carry a retry policy: a runner killed mid-rollout (its attempt goes silent) gets the
rollout retried by the coordinator instead of holding the step until ``rollout_timeout_s`` (found by
the kill -9 fault suite; the coordinator side is tests/services/coordinator/test_runner_crash.py)."""

from __future__ import annotations

from voltbus.services.learner.grpo.loop import GRPO
from voltbus.services.settings import LearnerSettings


def test_batch_rollouts_are_retried_after_a_silent_attempt() -> None:
    settings = LearnerSettings(tasks_per_step=2, group_size=2, attempt_unresponsive_s=3.0, max_attempts=4)
    requests = GRPO(settings).requests("run-1", 0, [{"a": 1}, {"a": 2}], "run-1:1")
    assert len(requests) == 4
    for r in requests:
        assert r.config is not None
        assert r.config.unresponsive_seconds == 3.0 and r.config.max_attempts == 4
        assert set(r.config.retry_condition) == {"unresponsive", "timeout"}


def test_the_default_retries_twice_after_a_minute_of_silence() -> None:
    [request] = GRPO(LearnerSettings(tasks_per_step=1, group_size=1)).requests("r", 0, [{"a": 1}], "r:1")
    assert request.config is not None
    assert (request.config.unresponsive_seconds, request.config.max_attempts) == (60.0, 3)
