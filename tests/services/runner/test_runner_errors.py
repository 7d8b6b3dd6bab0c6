"""Agents that fail, in every way, on a real bus: the runner records each failure with its reason and keeps
serving; spans the bus refuses fail the attempt with ``SpansNotPublished``; sync agents left stuck by their
timeouts never keep later rollouts from running."""

from __future__ import annotations

from voltbus.schemas.rollouts import RolloutConfig
from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store

from .conftest import runner_settings
from .test_runner import AGENTS, run_until_done, telemetry


async def test_one_runner_keeps_serving_after_every_kind_of_agent_failure(
    store: Store, nats_settings: NatsSettings
) -> None:
    kinds = ["raise", "wrong_type", "bad_reward", "stop_iteration", "exit", "good"]
    rollouts = [await store.enqueue_rollout({"do": kind}) for kind in kinds]
    finished = await run_until_done(
        runner_settings(nats_settings), f"{AGENTS}:misbehaves", store, [r.rollout_id for r in rollouts], timeout=60
    )
    assert [r.status for r in finished] == ["failed"] * 5 + ["succeeded"]
    assert {r.attempt.worker_id for r in finished} == {"Worker-0"}  # one runner, one slot, served them all
    reasons = [(r.attempt.error["type"], r.attempt.error["message"]) for r in finished[:5]]
    assert reasons[0] == ("ValueError", "cannot solve {'do': 'raise'}")
    assert reasons[1][0] == "TypeError" and "Invalid raw result type str" in reasons[1][1]
    assert reasons[2][0] == "TypeError" and "Reward must be a number" in reasons[2][1]
    assert reasons[3] == ("RuntimeError", "the agent raised StopIteration")
    assert reasons[4] == ("RuntimeError", "the agent raised SystemExit: 3")
    assert "StopIteration" in finished[3].attempt.error["traceback"]  # the cause is kept
    assert finished[5].attempt.error is None
    _, rewards = await telemetry(store, finished[5].rollout_id)
    assert [e.value for e in rewards] == [1.0]


async def test_spans_the_bus_refuses_fail_the_attempt_with_spans_not_published(
    store: Store, nats_settings: NatsSettings
) -> None:
    stream = await store.log.js.stream_info(store.topology.spans_stream)
    stream.config.max_bytes = 16 * 1024  # a full stream: the server refuses what is past its cap
    await store.log.js.update_stream(stream.config)
    rollout = await store.enqueue_rollout({"x": 1})
    nats = nats_settings.model_copy(update={"publish_retries": 0})
    [done] = await run_until_done(runner_settings(nats), f"{AGENTS}:big_spans", store, [rollout.rollout_id])
    assert done.status == "failed" and done.attempt.error["type"] == "SpansNotPublished"
    assert done.attempt.error["message"].startswith("spans of this attempt could not be stored: ")
    spans, rewards = await telemetry(store, rollout.rollout_id)
    assert spans == [] and rewards == []  # the agent's return of 1.0 did not make it a success


async def test_sync_agents_stuck_past_their_timeout_do_not_use_up_the_runners_threads(
    store: Store, nats_settings: NatsSettings
) -> None:
    """A sync agent's thread cannot be stopped in-process, but more of them stuck than a thread pool holds
    (cores + 4, at most 32) must not keep later attempts, or the runner's stop, waiting for a thread."""
    # the second attempts must run their agent (a thread, a span) within the timeout: 2 s, not 0.3, on a loaded machine
    config = RolloutConfig(timeout_seconds=2, max_attempts=2, retry_condition=["timeout"])
    requests = [EnqueueRolloutRequest(input={"n": i}, config=config) for i in range(33)]
    rollouts = await store.enqueue_many_rollouts(requests)
    finished = await run_until_done(
        runner_settings(nats_settings, slots=8),
        f"{AGENTS}:stuck_on_first_attempt",  # its first attempt sleeps for an hour
        store,
        [r.rollout_id for r in rollouts],
        timeout=60,
    )
    assert [(r.status, r.attempt.sequence_id) for r in finished] == [("succeeded", 2)] * 33
