"""LitAgent: rollout dispatch, async detection, and the weak links to trainer, runner and tracer."""

from __future__ import annotations

import gc
import warnings
from typing import Any

import pytest

from voltbus.services.clients.agent.litagent import LitAgent, is_v0_1_rollout_api
from voltbus.services.clients.store.types import NamedResources, Rollout
from voltbus.services.clients.telemetry.tracing import DummyTracer

ROLLOUT = Rollout(rollout_id="ro-1", input="task", start_time=0.0)


class Holder:
    """A stand-in runner or trainer (anything weak-referenceable)."""

    def __init__(self, tracer: Any = None) -> None:
        if tracer is not None:
            self.tracer = tracer


class Recorder(LitAgent[str]):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
        self.calls.append(("rollout", task))
        return 1.0


def test_base_rollouts_are_not_implemented() -> None:
    agent = LitAgent[str]()
    with pytest.raises(NotImplementedError, match=r"^Agents must implement the `rollout` method\.$"):
        agent.rollout("t", {}, ROLLOUT)
    with pytest.raises(NotImplementedError, match="`rollout` method"):
        agent.training_rollout("t", {}, ROLLOUT)
    with pytest.raises(NotImplementedError, match="`rollout` method"):
        agent.validation_rollout("t", {}, ROLLOUT)


async def test_base_async_rollouts_are_not_implemented() -> None:
    agent = LitAgent[str]()
    for method in (agent.rollout_async, agent.training_rollout_async, agent.validation_rollout_async):
        with pytest.raises(NotImplementedError, match="`rollout_async` method for async operations"):
            await method("t", {}, ROLLOUT)


def test_training_and_validation_delegate_to_rollout() -> None:
    agent = Recorder()
    assert agent.training_rollout("a", {}, ROLLOUT) == 1.0
    assert agent.validation_rollout("b", {}, ROLLOUT) == 1.0
    assert agent.calls == [("rollout", "a"), ("rollout", "b")]


def test_validation_calls_rollout_not_training_rollout() -> None:
    class TrainOnly(Recorder):
        def training_rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> float:
            return 0.0

    agent = TrainOnly()
    assert agent.training_rollout("a", {}, ROLLOUT) == 0.0
    assert agent.validation_rollout("b", {}, ROLLOUT) == 1.0


async def test_async_variants_delegate_to_rollout_async() -> None:
    class AsyncAgent(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> str:
            return f"{task}:{sorted(resources)}:{rollout.rollout_id}"

    agent = AsyncAgent()
    assert await agent.training_rollout_async("t", {}, ROLLOUT) == "t:[]:ro-1"
    assert await agent.validation_rollout_async("v", {}, ROLLOUT) == "v:[]:ro-1"


def test_is_async_detects_any_async_override() -> None:
    class Sync(LitAgent[str]):
        def rollout(self, task: str, resources: NamedResources, rollout: Rollout) -> None: ...

    class A1(LitAgent[str]):
        async def rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None: ...

    class A2(LitAgent[str]):
        async def training_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None: ...

    class A3(LitAgent[str]):
        async def validation_rollout_async(self, task: str, resources: NamedResources, rollout: Rollout) -> None: ...

    class A4(A1):
        pass

    assert [c().is_async() for c in (LitAgent, Sync, A1, A2, A3, A4)] == [False, False, True, True, True, True]


def test_trained_agents_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="`trained_agents` is deprecated"):
        agent = LitAgent[str](trained_agents="main")
    assert agent.trained_agents == "main"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert LitAgent[str]().trained_agents is None


def test_runner_and_trainer_unset_raise() -> None:
    agent = LitAgent[str]()
    with pytest.raises(ValueError, match=r"^Runner has not been set for this agent\.$"):
        agent.get_runner()
    with pytest.raises(ValueError, match="Runner has not been set"):
        _ = agent.runner
    with pytest.raises(ValueError, match=r"^Trainer has not been set for this agent\.$"):
        agent.get_trainer()
    with pytest.raises(ValueError, match="Trainer has not been set"):
        _ = agent.trainer


def test_runner_and_trainer_are_held_weakly() -> None:
    agent = LitAgent[str]()
    runner, trainer = Holder(), Holder()
    agent.set_runner(runner)
    agent.set_trainer(trainer)
    assert agent.get_runner() is runner and agent.runner is runner
    assert agent.get_trainer() is trainer and agent.trainer is trainer
    del runner, trainer
    gc.collect()
    with pytest.raises(
        ValueError, match=r"^Runner reference is no longer valid \(object has been garbage collected\)\.$"
    ):
        agent.get_runner()
    with pytest.raises(ValueError, match=r"^Trainer reference is no longer valid"):
        agent.get_trainer()


def test_tracer_prefers_the_runner() -> None:
    agent = LitAgent[str]()
    runner_tracer, trainer_tracer = DummyTracer(), DummyTracer()
    runner, trainer = Holder(runner_tracer), Holder(trainer_tracer)
    agent.set_trainer(trainer)
    agent.set_runner(runner)
    assert agent.get_tracer() is runner_tracer and agent.tracer is runner_tracer


def test_tracer_falls_back_to_the_trainer() -> None:
    agent = LitAgent[str]()
    trainer_tracer = DummyTracer()
    trainer = Holder(trainer_tracer)
    agent.set_trainer(trainer)
    assert agent.tracer is trainer_tracer  # no runner at all
    runner = Holder()
    agent.set_runner(runner)
    assert agent.tracer is trainer_tracer  # a runner without a tracer


def test_tracer_without_runner_or_trainer_raises() -> None:
    agent = LitAgent[str]()
    with pytest.raises(ValueError, match="Runner has not been set"):
        _ = agent.tracer
    runner = Holder()  # a runner without a tracer, and no trainer
    agent.set_runner(runner)
    with pytest.raises(ValueError, match="Trainer has not been set"):
        agent.get_tracer()


def test_deprecated_hooks_are_no_ops() -> None:
    agent = LitAgent[str]()
    assert agent.on_rollout_start("t", Holder(), DummyTracer()) is None
    assert agent.on_rollout_end("t", ROLLOUT, Holder(), DummyTracer()) is None


def test_is_v0_1_rollout_api() -> None:
    def v01(task: str, rollout_id: str, resources: NamedResources) -> None: ...

    def v03(task: str, llm: object, rollout: Rollout) -> None: ...

    assert is_v0_1_rollout_api(v01) and not is_v0_1_rollout_api(v03)
