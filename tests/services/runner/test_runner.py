"""The runner on a real bus: an Agent Lightning-style agent unchanged, every return shape and emitter,
errors recorded, jinja prompts, isolation of hanging and self-killing agents, SIGTERM."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.conftest import wait_for
from voltbus.schemas.resources import PromptTemplate
from voltbus.schemas.rollouts import RolloutConfig
from voltbus.schemas.spans import RewardReported, SpanRecorded
from voltbus.services.eventlog import Envelope
from voltbus.services.runner.app import AgentFailed, Runner
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import runner_settings

AGENTS = "tests.services.runner.calc_agent"


async def telemetry(store: Store, rollout_id: str) -> tuple[list[SpanRecorded], list[RewardReported]]:
    items = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    spans = [e for e in items if isinstance(e, SpanRecorded) and e.rollout_id == rollout_id]
    rewards = [e for e in items if isinstance(e, RewardReported) and e.rollout_id == rollout_id]
    return spans, rewards


async def run_until_done(
    settings: object, agent: str, store: Store, rollout_ids: list[str], timeout: float = 30
) -> list:
    stop = asyncio.Event()
    async with Runner(settings, agent) as runner:  # type: ignore[arg-type]
        running = asyncio.create_task(runner.run(stop))
        finished = await store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)
        stop.set()
        await running
    return finished


async def test_calc_agent_written_for_agent_lightning_runs_unchanged(store: Store, nats_settings: NatsSettings) -> None:
    tasks = [{"question": "2+3", "answer": 5}, {"question": "6*7", "answer": 41}]
    rollouts = [await store.enqueue_rollout(t, mode="train") for t in tasks]
    finished = await run_until_done(
        runner_settings(nats_settings, slots=2), f"{AGENTS}:CalcAgent", store, [r.rollout_id for r in rollouts]
    )
    assert [r.status for r in finished] == ["succeeded", "succeeded"]
    rewards = []
    for r in rollouts:
        spans, reward_events = await telemetry(store, r.rollout_id)
        names = [s.name for s in spans]
        assert names.count("agentlightning.message") == 1 and names.count("agentlightning.object") == 1
        assert [s.sequence_id for s in spans] == sorted(s.sequence_id for s in spans)
        rewards += [e.value for e in reward_events]
    assert rewards == [1.0, 0.0]


@pytest.mark.parametrize(
    ("agent", "status", "error"),
    [
        ("returns_float", "succeeded", None),
        ("returns_spans", "succeeded", None),
        ("raises", "failed", ("ValueError", "cannot solve")),
        ("wrong_type", "failed", ("TypeError", "Invalid raw result type str")),
        ("bad_reward", "failed", ("TypeError", "Reward must be a number")),
    ],
)
async def test_every_result_shape_and_error(
    store: Store, nats_settings: NatsSettings, agent: str, status: str, error: tuple[str, str] | None
) -> None:
    rollout = await store.enqueue_rollout({"x": 1})
    [done] = await run_until_done(runner_settings(nats_settings), f"{AGENTS}:{agent}", store, [rollout.rollout_id])
    assert done.status == status
    if error:
        assert done.attempt.error["type"] == error[0] and error[1] in done.attempt.error["message"]
        assert "Traceback" in done.attempt.error["traceback"]
    else:
        _, rewards = await telemetry(store, rollout.rollout_id)
        assert [e.value for e in rewards] == [0.25 if agent == "returns_float" else 0.75]


async def test_jinja_prompt_template(store: Store, nats_settings: NatsSettings) -> None:
    template = PromptTemplate(template="{% for i in items %}[{{ i|upper }}]{% endfor %}", engine="jinja")
    update = await store.add_resources({"prompt": template})
    rollout = await store.enqueue_rollout({"items": ["a", "b"]}, resources_id=f"{update.resources_id}:1")
    [done] = await run_until_done(runner_settings(nats_settings), f"{AGENTS}:jinja_agent", store, [rollout.rollout_id])
    assert done.status == "succeeded"
    spans, rewards = await telemetry(store, rollout.rollout_id)
    assert any(s.attributes.get("agentlightning.message.body") == "[A][B]" for s in spans)
    assert [e.value for e in rewards] == [2.0]


async def test_isolated_hanging_agent_is_killed_at_its_timeout_and_retried(
    store: Store, nats_settings: NatsSettings
) -> None:
    config = RolloutConfig(timeout_seconds=1.0, max_attempts=2, retry_condition=["timeout"])
    rollout = await store.enqueue_rollout("hang", config=config)
    [done] = await run_until_done(
        runner_settings(nats_settings, isolate=True), f"{AGENTS}:hangs", store, [rollout.rollout_id], timeout=60
    )
    assert done.status == "failed"
    assert [(a.sequence_id, a.status) for a in await store.get_attempts(rollout.rollout_id)] == [
        (1, "timeout"),
        (2, "timeout"),
    ]


async def test_isolated_agent_that_kills_itself_fails_with_the_reason(
    store: Store, nats_settings: NatsSettings
) -> None:
    rollout = await store.enqueue_rollout("boom")
    [done] = await run_until_done(
        runner_settings(nats_settings, isolate=True), f"{AGENTS}:kills_itself", store, [rollout.rollout_id]
    )
    assert done.status == "failed" and done.attempt.error["type"] == "AgentProcessDied"
    assert "signal 9 (SIGKILL)" in done.attempt.error["message"]


async def test_step_runs_one_task_and_raises(store: Store, nats_settings: NatsSettings) -> None:
    async with Runner(runner_settings(nats_settings, agents="in-process"), f"{AGENTS}:raises") as runner:
        with pytest.raises(ValueError, match="cannot solve"):  # the agent's own exception, in this process
            await runner.step({"q": 1})
    async with Runner(runner_settings(nats_settings), f"{AGENTS}:raises") as runner:  # the agent host
        with pytest.raises(AgentFailed, match="ValueError: cannot solve"):
            await runner.step({"q": 1})
    async with Runner(runner_settings(nats_settings), f"{AGENTS}:returns_float") as runner:
        done = await runner.step({"q": 2})
    assert done.status == "succeeded" and done.attempt.worker_id == "Worker-2"  # the third runner's first slot


async def test_openai_client_calls_are_captured_with_token_ids(store: Store, nats_settings: NatsSettings) -> None:
    from voltbus.schemas.resources import LLM

    from .stub_llm import stub_llm

    async with stub_llm() as base_url:
        update = await store.add_resources({"main_llm": LLM(endpoint=base_url, model="stub")})
        rollout = await store.enqueue_rollout({"question": "2+2", "answer": 4}, resources_id=f"{update.resources_id}:1")
        [done] = await run_until_done(
            runner_settings(nats_settings), f"{AGENTS}:openai_agent", store, [rollout.rollout_id]
        )
    assert done.status == "succeeded"
    spans, rewards = await telemetry(store, rollout.rollout_id)
    [call] = [s for s in spans if s.name == "openai.chat.completions.create"]
    assert call.attributes["voltbus.llm.prompt_token_ids"] == [101, 102, 103]
    assert call.attributes["voltbus.llm.response_token_ids"] == [7, 8]
    assert call.attributes["voltbus.llm.logprobs"] == [-0.125]
    assert call.attributes["voltbus.llm.usage.total_tokens"] == 5
    assert '"content": "2+2"' in call.attributes["voltbus.llm.request"]
    assert [e.value for e in rewards] == [1.0]


@pytest.mark.parametrize(
    ("agent", "span_name"),
    [("raw_response_agent", "openai.chat.completions.create"), ("parse_agent", "openai.chat.completions.parse")],
    ids=["with_raw_response.create", "parse"],
)
async def test_raw_response_and_parse_calls_are_captured_and_the_agent_gets_its_reply(
    store: Store, nats_settings: NatsSettings, agent: str, span_name: str
) -> None:
    """``with_raw_response`` (langchain-openai's way) hands the agent its ``LegacyAPIResponse`` and is recorded;
    ``parse`` (structured outputs) is recorded as a span of its own."""
    from voltbus.schemas.resources import LLM

    from .stub_llm import stub_llm

    async with stub_llm() as base_url:
        update = await store.add_resources({"main_llm": LLM(endpoint=base_url, model="stub")})
        rollout = await store.enqueue_rollout({"question": "2+2", "answer": 4}, resources_id=f"{update.resources_id}:1")
        [done] = await run_until_done(runner_settings(nats_settings), f"{AGENTS}:{agent}", store, [rollout.rollout_id])
    assert done.status == "succeeded", done.attempt.error
    spans, rewards = await telemetry(store, rollout.rollout_id)
    [call] = [s for s in spans if s.name.startswith("openai.")]
    assert call.name == span_name
    assert call.attributes["voltbus.llm.prompt_token_ids"] == [101, 102, 103]
    assert call.attributes["voltbus.llm.response_token_ids"] == [7, 8]
    assert '"content": "2+2"' in call.attributes["voltbus.llm.request"]
    assert [e.value for e in rewards] == [1.0]


async def test_in_process_async_agent_is_stopped_at_its_timeout(store: Store, nats_settings: NatsSettings) -> None:
    rollout = await store.enqueue_rollout("slow", config=RolloutConfig(timeout_seconds=0.5))
    [done] = await run_until_done(runner_settings(nats_settings), f"{AGENTS}:sleeps_async", store, [rollout.rollout_id])
    assert done.status == "failed" and done.attempt.status == "timeout"


class Recorder:
    """A hook object recording what the runner calls, and what the rollout-end hook is given."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.spans: list[object] = []
        self.last_trace: list[Any] = []

    def on_rollout_start(self, *, agent: object, runner: object, rollout: object) -> None:
        self.calls.append("rollout_start")

    async def on_trace_start(self, *, agent: object, runner: object, tracer: object, rollout: object) -> None:
        self.calls.append("trace_start")

    def on_trace_end(self, *, agent: object, runner: object, tracer: Any, rollout: object) -> None:
        self.calls.append("trace_end")
        self.last_trace = tracer.get_last_trace()

    def on_rollout_end(self, *, agent: object, runner: object, rollout: object, spans: list[object]) -> None:
        self.calls.append("rollout_end")
        self.spans = spans


class Raising:
    """A hook object whose every hook fails."""

    def on_rollout_start(self, **_: object) -> None:
        raise RuntimeError("a failing hook must not fail the rollout")

    async def on_trace_start(self, **_: object) -> None:
        raise RuntimeError("a failing hook must not fail the rollout")

    def on_trace_end(self, **_: object) -> None:
        raise RuntimeError("a failing hook must not fail the rollout")

    def on_rollout_end(self, **_: object) -> None:
        raise RuntimeError("a failing hook must not fail the rollout")


async def test_hooks_are_called_in_order(store: Store, nats_settings: NatsSettings) -> None:
    hooks = Recorder()
    async with Runner(runner_settings(nats_settings), f"{AGENTS}:returns_store_spans", hooks=[hooks]) as runner:
        done = await runner.step({"q": 1})
    assert done.status == "succeeded"
    assert hooks.calls == ["rollout_start", "trace_start", "trace_end", "rollout_end"]
    assert [s.name for s in hooks.spans] == ["custom.step"]  # type: ignore[attr-defined]  # the spans it returned


@pytest.mark.parametrize("then", [None, 0.25])
async def test_hooks_see_the_agents_trace_as_agent_lightning_gives_it(
    store: Store, nats_settings: NatsSettings, then: float | None
) -> None:
    """``tracer.get_last_trace()`` in ``on_trace_end``, and the spans ``on_rollout_end`` gets for a None or a
    number: the attempt's stored spans with their sequence ids (a number's own reward span not among them)."""
    hooks = Recorder()
    async with Runner(runner_settings(nats_settings), f"{AGENTS}:traced_then", hooks=[hooks]) as runner:
        done = await runner.step({"then": then})
        assert runner.tracer is not None and runner.tracer.traces == {}  # forgotten once the rollout ended
    assert done.status == "succeeded"
    names = ["agentlightning.message", "agentlightning.object"]
    names += ["agentlightning.annotation"] if then is None else []  # the agent's own reward; a number's comes after
    assert [s.name for s in hooks.last_trace] == names
    assert hooks.spans == hooks.last_trace
    stored, _ = await telemetry(store, done.rollout_id)
    ids = [(s.span_id, s.sequence_id) for s in stored]
    assert [(s.span_id, s.sequence_id) for s in hooks.last_trace] == ids[: len(names)]
    assert {s.attempt_id for s in hooks.last_trace} == {done.attempt.attempt_id}
    assert len(stored) == 3  # every span stored once: the early flush for the hooks did not store any twice


async def test_a_failing_hook_cannot_fail_a_rollout_or_skip_the_next_hooks(
    store: Store, nats_settings: NatsSettings, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder()
    hooks = [Raising(), recorder]
    async with Runner(runner_settings(nats_settings), f"{AGENTS}:returns_float", hooks=hooks) as runner:
        done = await runner.step({"q": 1})
    assert done.status == "succeeded" and done.attempt.error is None
    assert recorder.calls == ["rollout_start", "trace_start", "trace_end", "rollout_end"]
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hook Raising.")]
    hooks_in_order = ("rollout_start", "trace_start", "trace_end", "rollout_end")
    assert failed == [f"hook Raising.on_{name} failed" for name in hooks_in_order]


@pytest.mark.parametrize(
    ("agent", "name"), [("returns_store_spans", "custom.step"), ("returns_otel_spans", "user.work")]
)
async def test_returned_span_lists_are_recorded(
    store: Store, nats_settings: NatsSettings, agent: str, name: str
) -> None:
    rollout = await store.enqueue_rollout({"q": 1})
    [done] = await run_until_done(runner_settings(nats_settings), f"{AGENTS}:{agent}", store, [rollout.rollout_id])
    assert done.status == "succeeded"
    spans, _ = await telemetry(store, rollout.rollout_id)
    assert [s.name for s in spans] == [name] and spans[0].attempt_id == done.attempt.attempt_id


async def test_an_agents_own_timeout_error_is_a_failure_not_an_expiry(
    store: Store, nats_settings: NatsSettings
) -> None:
    rollout = await store.enqueue_rollout("x", config=RolloutConfig(timeout_seconds=30))
    [done] = await run_until_done(
        runner_settings(nats_settings), f"{AGENTS}:raises_its_own_timeout", store, [rollout.rollout_id]
    )
    assert done.attempt.status == "failed" and done.attempt.error["type"] == "TimeoutError"
    assert "own HTTP call" in done.attempt.error["message"]


async def worker_reports(store: Store, worker_id: str) -> list[str]:
    """The statuses of every snapshot the worker's subject holds, in order."""
    subject = store.topology.worker(worker_id)
    return [e.event.status async for e in store.log.replay("control", subject=subject) if isinstance(e, Envelope)]


async def test_a_fast_attempt_writes_no_worker_status_and_a_long_one_reports_busy_then_idle(
    store: Store, nats_settings: NatsSettings
) -> None:
    fast = await store.enqueue_rollout({"x": 1})
    settings = runner_settings(nats_settings, busy_report_s=0.5)
    [done] = await run_until_done(settings, f"{AGENTS}:returns_float", store, [fast.rollout_id])
    assert done.status == "succeeded" and done.attempt.worker_id == "Worker-0"
    assert "busy" not in await worker_reports(store, "Worker-0")  # ended within busy_report_s: no status write

    slow = await store.enqueue_rollout({"x": 2})
    stop = asyncio.Event()
    async with Runner(settings, f"{AGENTS}:takes_a_second") as runner:
        (slot,) = runner.worker_ids
        assert slot == "Worker-1"  # the next free number: the first runner had Worker-0
        running = asyncio.create_task(runner.run(stop))

        async def busy() -> bool:
            worker = await store.get_worker_by_id(slot)
            return worker is not None and worker.status == "busy"

        await wait_for(busy, timeout=10, what="the worker reported busy while its attempt runs")
        worker = await store.get_worker_by_id(slot)
        assert worker is not None and worker.current_rollout_id == slow.rollout_id
        [finished] = await store.wait_for_rollouts(rollout_ids=[slow.rollout_id], timeout=30)
        stop.set()
        await running
    assert finished.status == "succeeded"
    worker = await store.get_worker_by_id(slot)
    assert worker is not None and (worker.status, worker.current_attempt_id) == ("idle", None)


async def test_runners_on_one_bus_never_share_a_worker_id(store: Store, nats_settings: NatsSettings) -> None:
    ids = []
    for slots in (3, 2):  # one process holds one runner at a time (its tracer is the active one)
        async with Runner(runner_settings(nats_settings, slots=slots), f"{AGENTS}:returns_float") as runner:
            ids += runner.worker_ids
    assert ids == [f"Worker-{n}" for n in range(5)]  # Agent Lightning's Worker-<n>, numbered across runners
    named = runner_settings(nats_settings, slots=2, worker_prefix="gpu")
    async with Runner(named, f"{AGENTS}:returns_float") as third:
        assert third.worker_ids == ["gpu-0", "gpu-1"]  # a prefix that is set numbers from 0
