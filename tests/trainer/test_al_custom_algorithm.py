"""Agent Lightning's own algorithms inside ``Trainer``: an ``@algo`` function (AL's apo_custom_algorithm_trainer.py
shape: ``Trainer(n_workers=1, algorithm=...).fit(agent)``), an ``Algorithm`` subclass, a ``FastAlgorithm`` in
``dev``; each uses the store client's AL methods against the trainer's runners, on a real nats-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import voltbus as agl
from voltbus.algorithm import Algorithm, FastAlgorithm, algo
from voltbus.services.settings import NatsSettings


@agl.rollout
async def apo_rollout(task: str, prompt_template: agl.PromptTemplate) -> float:
    """AL's example agent with its model replaced by a rule: the 'knowledgeable' prompt scores best."""
    return 1.0 if "knowledgeable" in prompt_template.format(any_question=task) else 0.3


@algo
async def apo_algorithm(*, store: Any) -> tuple[str, float]:
    """AL's apo_custom_algorithm.py loop (its printing left out): each prompt as resources, one rollout, its reward."""
    prompt_candidates = [
        "You are a helpful assistant. {any_question}",
        "You are a knowledgeable AI. {any_question}",
        "You are a friendly chatbot. {any_question}",
    ]
    prompt_and_rewards: list[tuple[str, float]] = []
    for prompt in prompt_candidates:
        await store.add_resources({"main_prompt": agl.PromptTemplate(template=prompt, engine="f-string")})
        rollout = await store.enqueue_rollout(input="Explain why the sky appears blue.", mode="train")
        for _ in range(60):
            rollouts = await store.wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=1.0)
            if rollouts:
                break
        else:
            raise RuntimeError("Expected a completed rollout from the client, but got none.")
        if rollouts[0].status != "succeeded":
            raise RuntimeError(f"Rollout {rollout.rollout_id} did not succeed. Status: {rollouts[0].status}")
        spans = await store.query_spans(rollout.rollout_id)
        final_reward = agl.find_final_reward(spans)
        assert final_reward is not None, "Expected a final reward from the client."
        prompt_and_rewards.append((prompt, final_reward))
    return max(prompt_and_rewards, key=lambda x: x[1])


@pytest.fixture
def bus_env(monkeypatch: pytest.MonkeyPatch, nats_settings: NatsSettings) -> None:
    monkeypatch.setenv("VOLTBUS_NATS__URL", nats_settings.url)
    monkeypatch.setenv("VOLTBUS_NATS__NAMESPACE", nats_settings.namespace)


@pytest.mark.timeout(300)
def test_an_algo_function_runs_inside_trainer_with_als_store_calls(bus_env: None) -> None:
    trainer = agl.Trainer(n_workers=1, algorithm=apo_algorithm)
    best = trainer.fit(apo_rollout)
    assert best == ("You are a knowledgeable AI. {any_question}", 1.0)


class Scorer(Algorithm):
    """A subclass with AL's accessors: scores the initial template on the training tasks."""

    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> dict[str, Any]:
        store = self.get_store()
        resources = await store.add_resources(self.get_initial_resources() or {})
        rollouts = [await store.enqueue_rollout(task, mode="train", resources_id=resources.resources_id)
                    for task in train_dataset]  # fmt: skip
        done = await store.wait_for_rollouts(rollout_ids=[r.rollout_id for r in rollouts], timeout=120)
        rewards = [agl.find_final_reward(await store.query_spans(r.rollout_id)) for r in done]
        return {"rewards": rewards, "val": val_dataset, "trainer": self.get_trainer(), "async": self.is_async()}


class QuickCheck(FastAlgorithm):
    async def run(self, train_dataset: Any = None, val_dataset: Any = None) -> str:
        rollout = await self.get_store().enqueue_rollout(train_dataset[0])
        [done] = await self.get_store().wait_for_rollouts(rollout_ids=[rollout.rollout_id], timeout=120)
        return done.status


@pytest.mark.timeout(300)
def test_an_algorithm_subclass_gets_the_store_resources_and_datasets(bus_env: None) -> None:
    seed = {"main_prompt": agl.PromptTemplate(template="You are a knowledgeable AI. {any_question}")}
    trainer = agl.Trainer(algorithm=Scorer(), n_runners=2, initial_resources=seed)
    out = trainer.fit(apo_rollout, ["a", "b"], val_dataset=["c"])
    assert out["rewards"] == [1.0, 1.0] and out["val"] == ["c"] and out["trainer"] is trainer and out["async"]
    assert agl.Trainer(algorithm=QuickCheck(), initial_resources=seed).dev(apo_rollout, ["d"]) == "succeeded"
    with pytest.raises(NotImplementedError, match="implement run"):
        asyncio.run(Algorithm().fit(agl.Trainer(), apo_rollout, ["x"], []))
