"""examples/sql_agent: the table and gold queries, the reward by result comparison, the shipped
checkpoint writing runnable SQL, and one tiny GRPO step through the real system."""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType

import msgspec
import torch

from voltbus.model import load_model_dir
from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.settings import NatsSettings
from voltbus.store import connect
from voltbus.trainer import GRPO, Trainer
from voltbus.trainer.example import load_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sql_agent"


def load(name: str) -> ModuleType:
    return load_module(EXAMPLE / f"{name}.py", f"voltbus_example_sql_test_{name}")


def test_gold_queries_run_and_twins_differ() -> None:
    agent = load("agent")
    data = agent.data
    assert data.rows() == data.rows() and len(data.rows()) == 40
    tasks = data.tasks(200, seed=0)
    assert tasks == data.tasks(200, seed=0) != data.tasks(200, seed=1)
    assert all(data.execute(t["sql"]) is not None and agent.reward(t["sql"], t["sql"]) == 1.0 for t in tasks)
    differ = 0
    for i in range(len(data.TEMPLATES)):
        for value in ("sales", "oslo", "40", "60"):
            if data.TEMPLATES[i][2] in (("dept", "city") if value.isalpha() else ("age", "pay")):
                differ += agent.reward(data.render(data.twin(i), value)[1], data.render(i, value)[1]) == 0.0
    assert differ >= 20  # a twin's query almost never returns the right rows
    assert data.execute("delete from emp") is None and data.execute("select count(*) from emp") == [(40,)]
    assert data.execute("select count(*) from emp a, emp b, emp c, emp d") is None  # stopped, not run


def test_the_shipped_policy_writes_runnable_sql() -> None:
    agent, build = load("agent"), load("build_model")
    samples = [build.pair(random.Random(i)) for i in range(100)]
    assert all(not s[0][1] and s[1][1] and s[1][0].endswith("</s>") for s in samples)
    model, tok = load_model_dir(EXAMPLE / "model")
    tasks = agent.data.tasks(8, seed=1)
    prompts = [tok(agent.prompt(t["question"])).input_ids for t in tasks]
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in prompts])  # left-padded: one batch
    out = model.generate(
        input_ids=ids, attention_mask=(ids != tok.pad_token_id).long(), max_new_tokens=48, do_sample=False
    )
    rewards = []
    for task, row in zip(tasks, out[:, width:], strict=True):
        sql = tok.decode(row, skip_special_tokens=True)
        assert agent.data.execute(sql) is not None, sql
        rewards.append(agent.reward(sql, task["sql"]))
    assert sum(rewards) > 0  # greedy, it answers some questions right


async def test_one_grpo_step(nats_settings: NatsSettings, tmp_path: Path) -> None:
    run, agent = load("run"), load("agent")
    settings = run.settings(nats_settings.namespace)
    settings.nats = nats_settings.model_copy(update={"request_timeout_s": 30.0})  # model loads on the loop
    algo = GRPO(model_dir=run.MODEL, steps=1, tasks_per_step=2, group_size=4, weights_dir=tmp_path / "weights")
    trainer = Trainer(algorithm=algo, n_runners=8, settings=settings, say=lambda _: None)
    result = await algo.fit(trainer, agent.sql_agent, agent.data.tasks(2, seed=0), [])
    [step] = result["steps"]
    assert step["rollouts_trained"] == step["rows"] == 8 and 0.0 <= step["reward_mean"] <= 1.0
    store = await connect(settings=settings.nats)
    try:
        events = [e.event async for e in store.log.telemetry() if isinstance(e, Envelope)]
    finally:
        await store.close()
    calls = [e for e in events if isinstance(e, ModelCalled) and e.status == "ok"]
    rewards = {e.attempt_id: e.value for e in events if isinstance(e, RewardReported)}
    assert len(calls) == len(rewards) == 8
    for call in calls:  # each recorded completion, run again, earns the reward the agent reported
        request, response = msgspec.json.decode(call.request), msgspec.json.decode(call.response)
        gold = next(t["sql"] for t in agent.data.tasks(2, seed=0) if t["question"] in request["prompt"])
        assert agent.reward(response["choices"][0]["text"].strip(), gold) == rewards[call.attempt_id]
