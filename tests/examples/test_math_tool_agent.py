"""examples/math_tool_agent: a calculator tool between two model calls of one rollout. The tool is
checked on its own; one tiny GRPO step runs through the real system, and every rollout that used the
tool left two recorded calls that the adapter stitches into one training row, tool output masked."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from types import ModuleType

from voltbus.model import build_tokenizer
from voltbus.projections.adapter import AdapterSettings, AttemptInput, CallRow, RewardRow, adapt
from voltbus.schemas.spans import ModelCalled, RewardReported
from voltbus.services.eventlog import Envelope
from voltbus.services.learner.session import Session
from voltbus.services.settings import NatsSettings
from voltbus.store import connect
from voltbus.trainer import GRPO, Trainer
from voltbus.trainer.example import load_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "math_tool_agent"


def load(name: str) -> ModuleType:
    return load_module(EXAMPLE / f"{name}.py", f"voltbus_example_math_tool_{name}")


def test_tool_tasks_and_warm_start_transcripts() -> None:
    agent = load("agent")
    expressions = ("17*23", "12+45+78", "9*9+1", "import os", "")
    assert [agent.calc(e) for e in expressions] == ["391", "135", "82", "error", "error"]
    assert agent.tasks(5, seed=1) == agent.tasks(5, seed=1) != agent.tasks(5, seed=2)
    assert all(agent.calc(t["question"]) == str(t["answer"]) for t in agent.tasks(50, seed=0))
    build = load("build_model")
    rng = random.Random(0)
    samples = [build.transcript(rng) for _ in range(200)]
    tool = [s for s in samples if len(s) == 4]
    assert 60 < len(tool) < 140  # about half call the tool
    assert all(not s[2][1] and s[2][0].startswith("=") for s in tool)  # tool output is never trained on
    assert any(build.agent.TOOL_CALL.fullmatch(s[1][0].strip()).group(1) != s[0][0][2:-1] for s in tool)  # miscopies


async def test_one_grpo_step_stitches_tool_rollouts_into_one_row(nats_settings: NatsSettings, tmp_path: Path) -> None:
    run, agent = load("run"), load("agent")
    settings = run.settings(nats_settings.namespace)
    settings.nats = nats_settings.model_copy(update={"request_timeout_s": 30.0})  # model loads on the loop
    algo = GRPO(model_dir=run.MODEL, steps=1, tasks_per_step=2, group_size=4, weights_dir=tmp_path / "weights")
    trainer = Trainer(algorithm=algo, n_runners=16, settings=settings, say=lambda _: None)

    async def inspect(session: Session) -> list[dict[str, object]]:  # the live projection, before it is deleted
        sql = "SELECT mode, count(*) AS attempts FROM training_attempts WHERE starts_with(task_id, $run) GROUP BY mode"
        return (await session.query(sql, {"run": f"{session.run_id}:"})).to_pylist()

    algo.inspect = inspect
    result = await algo.fit(trainer, agent.math_agent, agent.tasks(2, seed=0), agent.tasks(6, seed=1))
    [step] = result["steps"]
    assert step["rollouts_trained"] == 8 and 0.0 <= step["reward_mean"] <= 1.0
    assert result["inspected"] == [{"mode": "train", "attempts": 8}]  # the batch's conversations, not validation's
    store = await connect(settings=settings.nats)
    try:
        events = [(e.seq, e.event) async for e in store.log.telemetry() if isinstance(e, Envelope)]
    finally:
        await store.close()
    calls: dict[str, list[CallRow]] = defaultdict(list)
    rewards: dict[str, list[RewardRow]] = defaultdict(list)
    for seq, e in events:
        if isinstance(e, ModelCalled) and e.status == "ok":
            row = CallRow(seq=seq, call_id=e.call_id, prompt_ids=e.prompt_ids, response_ids=e.response_ids)
            calls[e.attempt_id].append(row)
        elif isinstance(e, RewardReported):
            rewards[e.attempt_id].append(RewardRow(seq=seq, event_id=e.event_id, value=e.value))
    assert len(rewards) == 20  # 8 training + 6 validation rollouts before and after
    tok = build_tokenizer()
    two_calls = [a for a, c in calls.items() if len(c) == 2 and c[0].response_ids[-1] != tok.eos_token_id]
    assert two_calls, "no rollout called the tool"
    for attempt_id in two_calls:
        data = AttemptInput(rollout_id="r", attempt_id=attempt_id, calls=calls[attempt_id], rewards=rewards[attempt_id])
        [row] = adapt(data, AdapterSettings()).trajectories
        observation = [t for t, m in zip(row.response_ids, row.response_mask, strict=True) if m == 0]
        assert tok.decode(observation).startswith("=") and tok.decode(observation).endswith("\n")
        assert row.reward == rewards[attempt_id][0].value
