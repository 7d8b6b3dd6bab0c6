"""Agent Lightning 0.3's module paths and names under ``voltbus``: every ``from agentlightning.X import Y`` of its
examples and docs (for the modules voltbus maps) resolves as ``from voltbus.X import Y``, and the new names behave:
the ``reward`` decorator, ``setup_logging``, ``LitAgentRunner`` on a real bus, the stores, the env-var resolvers and
the adapters over a real run's spans."""

from __future__ import annotations

import asyncio
import importlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.services.runner.stub_llm import stub_llm
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import connect

# (module, name) of every import in Agent Lightning v0.3.0's examples/ and docs/ of a module voltbus maps
# (`git grep "from agentlightning" v0.3.0 -- examples docs`), plus the tracer submodules' classes
AL_IMPORTS = [
    ("types", "Dataset"),
    ("types", "Span"),
    ("types", "Triplet"),
    ("types", "NamedResources"),
    ("types", "PromptTemplate"),
    ("types", "LLM"),
    ("types", "RolloutMode"),
    ("types", "TaskInput"),
    ("types", "Rollout"),
    ("types", "Hook"),
    ("types", "AttemptedRollout"),
    ("types", "ResourcesUpdate"),
    ("types", "ProxyLLM"),
    ("types", "RolloutRawResult"),
    ("adapter", "TraceToMessages"),
    ("adapter", "TracerTraceToTriplet"),
    ("adapter", "TraceToTripletBase"),
    ("adapter", "LlmProxyTraceToTriplet"),
    ("adapter.triplet", "LlmProxyTraceToTriplet"),
    ("adapter.messages", "OpenAIMessages"),
    ("adapter.messages", "TraceToMessages"),
    ("litagent", "LitAgent"),
    ("litagent", "rollout"),
    ("runner", "LitAgentRunner"),
    ("store", "LightningStore"),
    ("store", "InMemoryLightningStore"),
    ("store", "LightningStoreClient"),
    ("tracer", "OtelTracer"),
    ("tracer", "AgentOpsTracer"),
    ("tracer.agentops", "AgentOpsTracer"),
    ("tracer.otel", "OtelTracer"),
    ("reward", "reward"),
    ("reward", "find_final_reward"),
    ("emitter", "find_final_reward"),
    ("emitter", "reward"),
    ("env_var", "LightningEnvVar"),
    ("env_var", "resolve_bool_env_var"),
    ("env_var", "resolve_str_env_var"),
    ("env_var", "resolve_int_env_var"),
    ("logging", "setup_logging"),
    ("logging", "setup"),
    ("semconv", "AGL_OPERATION"),
    ("semconv", "LightningSpanAttributes"),
    ("utils.otel", "make_tag_attributes"),
    ("utils.otel", "make_link_attributes"),
    ("utils.otel", "extract_links_from_attributes"),
    ("utils.otel", "query_linked_spans"),
]
TOP_LEVEL = [  # `from agentlightning import ...` and `agl.X` of the same examples and docs, for these names
    "setup_logging", "setup_module_logging", "Dataset", "LightningStoreClient", "InMemoryLightningStore",
    "LightningStore", "OtelTracer", "AgentOpsTracer", "LitAgentRunner", "LlmProxyTraceToTriplet", "TraceToMessages",
    "TracerTraceToTriplet", "TraceToTripletBase", "Hook", "LightningEnvVar", "resolve_bool_env_var",
]  # fmt: skip


@pytest.mark.parametrize(("module", "name"), AL_IMPORTS)
def test_agent_lightning_module_paths_resolve(module: str, name: str) -> None:
    assert getattr(importlib.import_module(f"voltbus.{module}"), name) is not None


def test_agent_lightning_top_level_names_resolve() -> None:
    import voltbus as agl

    assert [n for n in TOP_LEVEL if getattr(agl, n, None) is None] == []
    assert agl.OtelTracer is importlib.import_module("voltbus.tracer.otel").OtelTracer


# --- the agent the runner tests run: the model's answer judged by a @reward function ---------------------------


def _judge(answer: str, expected: int) -> float:
    return 1.0 if answer == str(expected) else 0.0


def _calc_agent() -> Any:
    import openai

    from voltbus.emitter import reward
    from voltbus.litagent import llm_rollout

    judge = reward(_judge)

    @llm_rollout
    async def calc(task: dict[str, Any], llm: Any) -> None:
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="not-needed")
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": task["question"]}], logprobs=True
        )
        judge(reply.choices[0].message.content, task["answer"])  # returns None: the decorator's span is the reward

    return calc


async def test_reward_decorator_emits_a_reward_the_store_sees(nats_settings: NatsSettings) -> None:
    from voltbus.emitter import reward
    from voltbus.litagent import rollout
    from voltbus.runner import LitAgentRunner
    from voltbus.schemas.spans import RewardReported
    from voltbus.tracer import OtelTracer

    @reward
    async def judge_async(value: float) -> float:
        return value

    @rollout
    async def agent(task: dict[str, Any], resources: Any) -> None:
        assert reward(_judge)("4", 4) == 1.0  # returned unchanged
        assert await judge_async(task["score"]) == task["score"]

    store = await connect(settings=nats_settings)
    try:
        runner = LitAgentRunner(OtelTracer())
        with runner.run_context(agent=agent, store=store):
            done = await runner.step({"score": 0.25})
        assert done.status == "succeeded"
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        values = [e.value for e in events if isinstance(e, RewardReported) and e.rollout_id == done.rollout_id]
        assert values == [1.0, 0.25]
    finally:
        await store.close()


def test_reward_decorator_warns_and_emits_nothing_for_a_non_number(tracer: Any) -> None:
    from voltbus.reward import reward

    with pytest.warns(UserWarning, match="not a number"):
        assert reward(lambda: "high")() == "high"
    assert reward(lambda: None)() is None
    assert tracer.spans == []
    reward(lambda: 3)()
    assert [s.name for s in tracer.spans] == ["agentlightning.annotation"]


async def test_step_raises_the_agents_error_and_refuses_a_store_it_cannot_run_on(nats_settings: NatsSettings) -> None:
    from voltbus.litagent import rollout
    from voltbus.runner import LitAgentRunner

    @rollout
    def broken(task: Any, resources: Any) -> float:
        raise ValueError("cannot solve")

    store = await connect(settings=nats_settings)
    try:
        runner = LitAgentRunner(None)
        with runner.run_context(agent=broken, store=store):
            with pytest.raises(ValueError, match="cannot solve"):
                await runner.step({"q": 1})
        with runner.run_context(agent=broken, store=object()):
            with pytest.raises(TypeError, match="needs a voltbus store"):
                await runner.step({"q": 1})
        with pytest.raises(ValueError, match="Store not initialized"):  # outside run_context
            await runner.step({"q": 1})
    finally:
        await store.close()


async def test_debug_flow_on_an_in_memory_store_with_adapters_over_its_spans() -> None:
    """Agent Lightning's debugging tutorial as written (tracer, runner, in-memory store, ``step`` with resources,
    then ``query_rollouts``/``query_spans``), and its adapters over the spans: triplets and chat messages."""
    from voltbus import LLM
    from voltbus.adapter import LlmProxyTraceToTriplet, TracerTraceToTriplet, TraceToMessages
    from voltbus.runner import LitAgentRunner
    from voltbus.store import InMemoryLightningStore, LightningStore
    from voltbus.tracer import AgentOpsTracer

    store = InMemoryLightningStore()
    try:
        assert isinstance(store, LightningStore)
        runner = LitAgentRunner[dict](AgentOpsTracer())  # no agentops installed: accepted all the same
        async with stub_llm() as base_url:
            with runner.run_context(agent=_calc_agent(), store=store):
                done = await runner.step(
                    {"question": "2+2", "answer": 4}, resources={"main_llm": LLM(endpoint=base_url, model="stub")}
                )
        assert done.status == "succeeded"

        async def projected() -> list[Any]:
            spans = await store.query_spans(done.rollout_id)
            return spans if len(spans) >= 2 else []

        spans = await wait_for(projected, 60, "the run's spans in the in-memory store's projection")
        rollouts = await store.query_rollouts()
        assert [r.rollout_id for r in rollouts] == [done.rollout_id]
        [triplet] = TracerTraceToTriplet().adapt(spans)
        assert triplet.prompt == {"token_ids": [101, 102, 103]} and triplet.response == {"token_ids": [7, 8]}
        assert triplet.reward == 1.0 and triplet.metadata["rollout_id"] == done.rollout_id
        assert LlmProxyTraceToTriplet().adapt(spans) == [triplet]
        assert TracerTraceToTriplet(llm_call_match=r"no\.such\.span")(spans) == []
        [example] = TraceToMessages().adapt(spans)
        assert example == {
            "messages": [{"role": "user", "content": "2+2"}, {"role": "assistant", "content": "4"}],
            "tools": None,
        }
    finally:
        await store.close()
        store.shutdown()


def test_in_memory_store_works_from_successive_event_loops() -> None:
    from voltbus.store import InMemoryLightningStore

    store = InMemoryLightningStore(thread_safe=True)  # Agent Lightning's keyword: accepted
    try:
        rollout = asyncio.run(store.enqueue_rollout({"q": 1}))
        found = asyncio.run(store.get_rollout_by_id(rollout.rollout_id))  # another loop: another connection
        assert found is not None and found.status == "queuing"
    finally:
        store.shutdown()
    assert not store.work.exists()  # its bus's and projection's files are gone
    store.shutdown()  # a second time: nothing to do


async def test_lightning_store_client_takes_a_bus_url_and_refuses_an_http_store_url(nats_server: Any) -> None:
    from voltbus.store import LightningStoreClient

    with pytest.raises(ValueError, match=r"takes the bus URL.*voltbus\.connect\(bus_url\).*voltbus store-server"):
        LightningStoreClient("http://localhost:4747")
    client = LightningStoreClient(nats_server.url)
    try:
        rollout = await client.enqueue_rollout({"q": 1})
        assert (await client.get_rollout_by_id(rollout.rollout_id)).status == "queuing"
        with pytest.raises(AttributeError, match="no_such_method"):
            client.no_such_method  # noqa: B018
    finally:
        await client.close()


# --- setup_logging ------------------------------------------------------------------------------------------------


@pytest.fixture
def restore_loggers() -> Iterator[None]:
    """The voltbus and test loggers as they were (other tests read voltbus's records through the root logger)."""
    names = ["voltbus", "voltbus.sub", "al_test_app"]
    saved = {
        n: (logging.getLogger(n).level, list(logging.getLogger(n).handlers), logging.getLogger(n).propagate)
        for n in names
    }
    yield
    for name, (level, handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate


def test_setup_logging_configures_the_voltbus_logger(tmp_path: Path, restore_loggers: None) -> None:
    from voltbus import setup_logging

    log_file = tmp_path / "logs" / "run.log"
    setup_logging(
        "DEBUG", color=False, apply_to=["al_test_app"], files=str(log_file), submodule_levels={"voltbus.sub": "WARNING"}
    )
    base = logging.getLogger("voltbus")
    assert base.level == logging.DEBUG and base.propagate is False
    assert any(type(h) is logging.StreamHandler for h in base.handlers)
    app = logging.getLogger("al_test_app")
    assert app.handlers == base.handlers and app.propagate is False and app.level == logging.DEBUG
    logging.getLogger("voltbus.services.x").debug("hello from voltbus")
    logging.getLogger("voltbus.sub").info("filtered out")
    for handler in base.handlers:
        handler.flush()
    text = log_file.read_text()
    assert "hello from voltbus" in text and "filtered out" not in text
    with pytest.raises(ValueError, match="Invalid log level"):
        setup_logging("LOUD")


def test_configure_logger_is_deprecated(restore_loggers: None) -> None:
    from voltbus.logging import configure_logger

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logger = configure_logger(logging.WARNING)
    assert logger.name == "voltbus" and logger.level == logging.WARNING
    assert [w.category for w in caught] == [DeprecationWarning]


# --- env vars -----------------------------------------------------------------------------------------------------


def test_resolve_env_vars_as_agent_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    from voltbus.env_var import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var

    port, managed, host = (
        LightningEnvVar.AGL_SERVER_PORT,
        LightningEnvVar.AGL_MANAGED_STORE,
        LightningEnvVar.AGL_SERVER_HOST,
    )
    for var in LightningEnvVar:
        monkeypatch.delenv(var.value, raising=False)
    assert resolve_int_env_var(port, fallback=4747) == 4747
    assert resolve_bool_env_var(managed) is None
    monkeypatch.setenv("AGL_SERVER_PORT", "4800")
    monkeypatch.setenv("AGL_MANAGED_STORE", " Off ")
    monkeypatch.setenv("AGL_SERVER_HOST", "0.0.0.0")
    assert resolve_int_env_var(port, fallback=4747) == 4800
    assert resolve_int_env_var(port, override=1, fallback=4747) == 1
    assert resolve_bool_env_var(managed, fallback=True) is False
    assert resolve_bool_env_var(managed, override=True) is True
    assert resolve_str_env_var(host) == "0.0.0.0"
    monkeypatch.setenv("AGL_SERVER_PORT", "high")
    monkeypatch.setenv("AGL_MANAGED_STORE", "maybe")
    with pytest.raises(ValueError, match="AGL_SERVER_PORT must be an integer"):
        resolve_int_env_var(port)
    with pytest.raises(ValueError, match="AGL_MANAGED_STORE must be one of"):
        resolve_bool_env_var(managed)


# --- tracers ------------------------------------------------------------------------------------------------------


async def test_otel_tracer_trace_context_stores_the_blocks_spans(nats_settings: NatsSettings) -> None:
    """Agent Lightning's tracer used alone: ``trace_context(store=, rollout_id=, attempt_id=)`` activates the tracer
    for the emitters, stores the block's spans at its end, and ``get_last_trace`` gives them afterwards."""
    from voltbus import emit_reward, get_active_tracer
    from voltbus.tracer import OtelTracer

    store = await connect(settings=nats_settings)
    tracer = OtelTracer()
    try:
        started = await store.start_rollout({"q": 1})
        rid, aid = started.rollout_id, started.attempt.attempt_id
        async with tracer.trace_context("t", store=store, rollout_id=rid, attempt_id=aid):
            assert get_active_tracer() is tracer
            emit_reward(0.5)
        assert get_active_tracer() is None
        [span] = tracer.get_last_trace()
        assert span.rollout_id == rid and span.name == "agentlightning.annotation"
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
        assert [getattr(e, "value", None) for e in events if type(e).__name__ == "RewardReported"] == [0.5]
    finally:
        tracer.shutdown()
        await store.close()


async def test_iter_runs_the_queued_rollouts_until_max_rollouts_or_the_stop_event(nats_settings: NatsSettings) -> None:
    import threading

    from voltbus.litagent import rollout
    from voltbus.runner import LitAgentRunner

    @rollout
    def solve(task: dict[str, Any], resources: Any) -> float:
        return float(task["q"])

    store = await connect(settings=nats_settings)
    try:
        queued = [await store.enqueue_rollout({"q": q}) for q in (1, 0)]
        runner = LitAgentRunner(None, max_rollouts=2)
        with runner.run_context(agent=solve, store=store):
            await asyncio.wait_for(runner.iter(), 60)  # returns once it ran two
        done = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in queued], timeout=10)
        assert [r.status for r in done] == ["succeeded", "succeeded"]
        stop = threading.Event()
        stop.set()
        with LitAgentRunner(None).run_context(agent=solve, store=store) as idle:
            await asyncio.wait_for(idle.iter(event=stop), 60)  # AL's stop event, set: it returns
    finally:
        await store.close()


def test_triplet_adapter_takes_agent_lightnings_arguments_and_refuses_bad_ones() -> None:
    import msgspec

    from voltbus.adapter import RewardMatchPolicy, TracerTraceToTriplet

    adapter = TracerTraceToTriplet(agent_match="write", reward_match=RewardMatchPolicy.FIRST_SIBLING, gamma=0.5)
    assert (adapter.settings.agent_match, adapter.settings.reward_policy, adapter.settings.gamma) == (
        "write",
        "first_sibling",
        0.5,
    )
    with pytest.raises(msgspec.ValidationError, match="reward_policy"):
        TracerTraceToTriplet(reward_match="last_one")
    with pytest.raises(msgspec.ValidationError, match="no_such_setting"):
        TracerTraceToTriplet(no_such_setting=1)


def _enqueue_then_shut_down(store: Any, done: Any) -> None:
    """A forked worker process given the in-memory store, as AL's multi-process recipes do."""
    rollout = asyncio.run(store.enqueue_rollout({"from": "child"}))
    store.shutdown()  # the child's copy owns nothing: the parent's bus and files must survive it
    done.put(rollout.rollout_id)


def test_in_memory_store_survives_a_forked_worker_and_pickles_as_a_client() -> None:
    import multiprocessing
    import pickle

    from voltbus.store import InMemoryLightningStore
    from voltbus.store.lightning import BusStore

    store = InMemoryLightningStore()
    try:
        context = multiprocessing.get_context("fork")
        done = context.Queue()
        child = context.Process(target=_enqueue_then_shut_down, args=(store, done))
        child.start()
        rollout_id = done.get(timeout=60)
        child.join(60)
        assert child.exitcode == 0
        assert Path(store.work, "nats").is_dir()  # the bus's files are the parent's, kept
        found = asyncio.run(store.get_rollout_by_id(rollout_id))  # the bus still runs, with the child's rollout
        assert found is not None and found.input == {"from": "child"}
        copy = pickle.loads(pickle.dumps(store))
        assert type(copy) is BusStore and copy.settings == store.settings
        assert asyncio.run(copy.get_rollout_by_id(rollout_id)) is not None
    finally:
        store.shutdown()


async def test_hooks_in_run_context_see_the_trace_as_in_agent_lightnings_apo_debug(nats_settings: NatsSettings) -> None:
    """``examples/apo/apo_debug.py``'s hook mode: a ``Hook`` subclass overriding only ``on_trace_end`` reads
    ``tracer.get_last_trace()`` there; the base class's other calls do nothing."""
    from voltbus import emit_message
    from voltbus.litagent import rollout
    from voltbus.runner import LitAgentRunner
    from voltbus.tracer import AgentOpsTracer
    from voltbus.types import Hook

    seen: list[str] = []

    class DebugHook(Hook):
        async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
            seen.extend(span.name for span in tracer.get_last_trace())

    @rollout
    def talk(task: str, resources: Any) -> float:
        emit_message(task)
        return 1.0

    store = await connect(settings=nats_settings)
    try:
        runner = LitAgentRunner[str](AgentOpsTracer())
        with runner.run_context(agent=talk, store=store, hooks=[DebugHook()]):
            done = await runner.step("Explain why the sky appears blue")
        assert done.status == "succeeded"
        assert seen == ["agentlightning.message"]
    finally:
        await store.close()


def test_agent_code_importing_voltbus_does_not_load_the_runner_or_the_in_memory_store() -> None:
    """``import voltbus`` stays what agent code needs: the runner service, the projector and the tracers' SDK
    provider arrive with the first use of ``agl.LitAgentRunner`` / ``agl.OtelTracer`` / an in-memory store."""
    import subprocess
    import sys

    heavy = ["voltbus.services.runner.app", "voltbus.services.projector.app", "voltbus.runner", "voltbus.tracer"]
    code = f"import sys, voltbus; print([m for m in {heavy!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
    code = "import voltbus as agl; agl.LitAgentRunner; import sys; print('voltbus.services.runner.app' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "True"
