"""``Trainer`` with Agent Lightning 0.3's arguments: what maps onto voltbus is honoured (n_workers, strategy's
n_runners, adapter, hooks, store client, port, max_rollouts), what has no effect is accepted with one warning naming
it, what voltbus cannot honour is refused precisely; ``dev(agent, train, val_dataset=...)``. On a real nats-server."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import voltbus as agl
from voltbus.projections.adapter import AdapterSettings
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings, Settings
from voltbus.store import connect
from voltbus.trainer import APO, Baseline, Trainer
from voltbus.trainer.algorithms import bus, system

TASKS = [{"reward": r} for r in (1.0, 0.0, 1.0, 1.0, 0.5)]


@agl.rollout
async def known_agent(task: dict[str, Any], resources: agl.NamedResources) -> float:
    return task["reward"]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "voltbus.trainer"]


class TracerTraceToTriplet:
    """Stands in for AL's adapter object: its arguments as attributes."""

    def __init__(self, agent_match: str | None = None, reward_match: str = "first_occurrence") -> None:
        self.agent_match, self.reward_match, self.repair_hierarchy = agent_match, reward_match, True


class LitAgentRunner:
    """Stands in for AL's default runner class."""


class CustomRunner:
    """A runner voltbus cannot run."""


def test_n_workers_is_the_number_of_runners_and_n_runners_wins(caplog: pytest.LogCaptureFixture) -> None:
    assert Trainer(n_workers=3).n_runners == 3 and Trainer().n_runners == 8
    assert warnings_of(caplog) == []
    both = Trainer(n_runners=2, n_workers=5)
    assert both.n_runners == both.n_workers == 2
    assert len(warnings_of(caplog)) == 1 and "n_workers" in warnings_of(caplog)[0]
    with pytest.raises(ValueError, match="n_runners must be a positive integer"):
        Trainer(n_workers=0)


def test_a_strategy_is_accepted_its_runner_count_read(caplog: pytest.LogCaptureFixture) -> None:
    trainer = Trainer(strategy={"type": "cs", "n_runners": 4}, n_runners=2)
    assert trainer.n_runners == 4
    [warning] = warnings_of(caplog)
    assert warning.startswith("Trainer(strategy=...) is accepted and has no effect")


def test_adapter_dict_and_object_become_the_projectors_settings(caplog: pytest.LogCaptureFixture) -> None:
    trainer = Trainer(adapter={"agent_match": "write"})
    assert trainer.adapter.agent_match == "write"  # AL's spider example prints this
    mapped = Trainer(adapter={"exclude_llm_call_in_reward": False, "reward_match": "first_sibling", "gamma": 0.5})
    assert mapped.adapter == AdapterSettings(exclude_calls_in_reward=False, reward_policy="first_sibling", gamma=0.5)
    assert warnings_of(caplog) == []
    from_object = Trainer(adapter=TracerTraceToTriplet(agent_match="sql"), settings=Settings())
    assert from_object.adapter == AdapterSettings(agent_match="sql") and warnings_of(caplog) == []
    assert Trainer(adapter={"repair_hierarchy": False}).adapter == AdapterSettings()
    [warning] = warnings_of(caplog)
    assert warning.startswith("Trainer(adapter=...): repair_hierarchy accepted and has no effect")
    assert Trainer(triplet_exporter={"agent_match": "x"}).adapter.agent_match == "x"  # AL's older name
    assert Trainer(adapter={"type": "agentlightning.adapter.TraceToMessages"}).adapter is None
    with pytest.raises(ValueError, match=r"Trainer\(adapter=dict\).*agent_mach"):
        Trainer(adapter={"agent_mach": "typo"})
    with pytest.raises(ValueError, match="voltbus cannot read this adapter"):
        Trainer(adapter=object())


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tracer": object()}, "tracer"),
        ({"llm_proxy": {"port": 4000}}, "llm_proxy"),
        ({"daemon": False}, "daemon"),
        ({"dev": True}, "dev"),
        ({"runner": LitAgentRunner()}, "runner"),
        ({"max_rollouts": 2, "algorithm": APO()}, "max_rollouts"),
    ],
)
def test_an_argument_without_effect_is_accepted_and_warned_once(
    caplog: pytest.LogCaptureFixture, kwargs: dict[str, Any], name: str
) -> None:
    Trainer(**kwargs)
    [warning] = warnings_of(caplog)
    assert warning.startswith(f"Trainer({name}=...) is accepted and has no effect in voltbus: ")


def test_what_voltbus_cannot_honour_is_refused_precisely() -> None:
    with pytest.raises(ValueError, match=r"Trainer\(store=object\): voltbus keeps rollouts"):
        Trainer(store=object())
    with pytest.raises(ValueError, match=r"Trainer\(runner=CustomRunner\): .* cannot run a custom one"):
        Trainer(runner=CustomRunner())
    with pytest.raises(TypeError, match=r"Trainer\(algorithm=object\): voltbus runs GRPO, APO, VERL, Baseline"):
        Trainer(algorithm=object())
    with pytest.raises(ValueError, match="port must be a TCP port"):
        Trainer(port=70000)
    with pytest.raises(ValueError, match="max_rollouts must be a positive integer"):
        Trainer(max_rollouts=0)
    with pytest.raises(TypeError, match="train_dataset is a string"):
        Trainer().fit(known_agent, "http://localhost:4747")
    with pytest.raises(ValueError, match="no tasks"):
        Trainer().dev(known_agent)


def test_port_is_where_the_embedded_bus_listens_and_components_come_from_dicts() -> None:
    trainer = Trainer(port=4999, algorithm={"type": "voltbus.trainer.Baseline"})
    assert trainer.settings.bus.port == 4999 and "port" in trainer.settings.bus.model_fields_set
    assert isinstance(trainer.algorithm, Baseline) and Trainer(port=None).settings.bus.port != 4999


@pytest.mark.timeout(300)
def test_dev_runs_train_and_val_datasets(nats_settings: NatsSettings) -> None:
    trainer = Trainer(n_runners=4, settings=Settings(nats=nats_settings), say=lambda _: None)
    out = trainer.dev(known_agent, TASKS[:3], val_dataset=TASKS[3:])
    assert out == {
        "train": {"mean_reward": pytest.approx(2 / 3), "rollouts": 3.0},
        "val": {"mean_reward": pytest.approx(0.75), "rollouts": 2.0},
    }
    assert trainer.dev(known_agent, val_dataset=TASKS[:2]) == {"val": {"mean_reward": 0.5, "rollouts": 2.0}}


@pytest.mark.timeout(300)
def test_max_rollouts_caps_dev_at_runners_times_rollouts(nats_settings: NatsSettings) -> None:
    lines: list[str] = []
    trainer = Trainer(n_runners=2, max_rollouts=1, settings=Settings(nats=nats_settings), say=lines.append)
    out = trainer.dev(known_agent, TASKS[:1], val_dataset=TASKS[1:])
    assert out == {"train": {"mean_reward": 1.0, "rollouts": 1.0}, "val": {"mean_reward": 0.0, "rollouts": 1.0}}
    assert "max_rollouts=1 x 2 runners: running 2 of 5 tasks" in lines


class CountingHook:
    def __init__(self) -> None:
        self.started: list[str] = []

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Any) -> None:
        self.started.append(rollout.rollout_id)


@pytest.mark.timeout(300)
def test_hooks_and_a_store_clients_bus_are_honoured(nats_settings: NatsSettings) -> None:
    async def store_client() -> Any:
        store = await connect(settings=nats_settings)
        await store.close()  # the Trainer reads its bus and namespace only
        return store

    store = asyncio.run(store_client())  # a store client of the test's namespace; the Trainer has no settings
    hook = CountingHook()
    out = Trainer(n_runners=2, store=store, hooks=hook, say=lambda _: None).dev(known_agent, TASKS[:3])
    assert out["train"]["rollouts"] == 3.0 and len(set(hook.started)) == 3

    async def statuses_in_namespace() -> list[str]:
        reader = await connect(settings=nats_settings)
        try:
            return [(await reader.get_rollout_by_id(rid)).status for rid in hook.started]  # type: ignore[union-attr]
        finally:
            await reader.close()

    assert asyncio.run(statuses_in_namespace()) == ["succeeded"] * 3  # on the store client's bus and namespace


class AdapterProbe:
    """An algorithm (any object with ``async fit``) reading the live projector's adapter settings."""

    async def fit(self, trainer: Any, agent: Any, train: list[Any], val: list[Any]) -> dict[str, Any]:
        async with bus(trainer.settings, trainer.say) as settings, system(trainer, settings, agent) as s:
            store = await connect(settings=s.nats)
            try:
                table = await Session(store, "probe", s.projector).query("SELECT settings FROM training_meta")
            finally:
                await store.close()
        return {"settings": table.column("settings").to_pylist()}


@pytest.mark.timeout(300)
def test_the_adapter_reaches_the_live_projector(nats_settings: NatsSettings) -> None:
    trainer = Trainer(AdapterProbe(), adapter={"agent_match": "write"}, settings=Settings(nats=nats_settings))
    [stored] = trainer.fit(known_agent, TASKS)["settings"]
    assert '"agent_match":"write"' in stored.replace(" ", "")
