"""examples/apo_prompt: APO improves the calculator agent's prompt template through the real system (a
real nats-server, coordinator, projector, runner), with the example's rule-based stand-in models as the
outer edge; every rollout's model call is on the bus and in the replayed projection. Tiny budgets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb
import pytest

from voltbus.services.learner.apo.critic import CRITIQUE_PROMPT, EDIT_PROMPT
from voltbus.services.learner.apo.search import Example
from voltbus.services.learner.apo.search import render_examples as render
from voltbus.services.settings import NatsSettings, Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from apo_prompt import stand_ins  # noqa: E402
from apo_prompt.run import SEED_TEMPLATE, main  # noqa: E402
from apo_prompt.tasks import make_tasks, reward  # noqa: E402

TINY = ["--rounds", "1", "--beam-width", "1", "--branch-factor", "2", "--gradient-batch-size", "3"]
TINY += ["--train", "6", "--val", "6", "--val-batch-size", "6", "--runners", "8"]


@pytest.mark.timeout(120)
def test_apo_improves_the_prompt_and_every_call_is_recorded(nats_settings: NatsSettings, tmp_path: Path) -> None:
    db = tmp_path / "apo.duckdb"
    result = main([*TINY, "--db", str(db)], Settings(nats=nats_settings))

    assert result["after"] > result["before"], result
    assert result["template"].startswith(SEED_TEMPLATE) and result["template"] != SEED_TEMPLATE
    assert any(line in result["template"] for line in stand_ins.INSTRUCTIONS.values())
    assert result["critic_errors"] == {}
    # each of the 2 children: one critique and one edit by the optimizer
    assert result["model_calls"][stand_ins.OPTIMIZER_MODEL] == 4 and len(result["critiques"]) == 2
    with duckdb.connect(str(db), read_only=True) as con:
        rollouts, rewarded, called = con.execute(
            "SELECT count(*), count(x.rollout_id), count(s.rollout_id) FROM rollouts r "
            "LEFT JOIN rewards x USING (rollout_id) "
            "LEFT JOIN spans s ON s.rollout_id = r.rollout_id AND s.name = 'openai.chat.completions.create'"
        ).fetchone()
        prompts = con.execute(
            "SELECT DISTINCT json_extract_string(s.attributes->>'voltbus.llm.request', '$.messages[0].content') "
            "FROM spans s WHERE s.name = 'openai.chat.completions.create'"
        ).fetchall()
    # gradient 2 x 3, initial val 6, round val (seed + children) x 6: one call and one reward each
    assert rollouts == rewarded == called == result["model_calls"][stand_ins.TASK_MODEL] >= 6 + 6 + 2 * 6
    filled = [p for (p,) in prompts if p.startswith(SEED_TEMPLATE.split("{")[0])]
    assert any(line in p for p in filled for line in stand_ins.INSTRUCTIONS.values())


def test_the_task_model_follows_only_the_instructions_it_is_given() -> None:
    task = {"expression": "7 + 3 * 4", "answer": "19"}
    seed = stand_ins.task_model(f"Calculate {task['expression']}.")
    assert seed == "Sure! Working through 7 + 3 * 4, I get 40." and reward(seed, task["answer"]) == 0.0
    careful = stand_ins.task_model(f"Calculate {task['expression']}. {stand_ins.INSTRUCTIONS['precedence']}")
    assert reward(careful, task["answer"]) == 0.5
    every = " ".join(stand_ins.INSTRUCTIONS.values())
    for t in make_tasks(30, seed=5):
        assert reward(stand_ins.task_model(f"Calculate {t['expression']}. {every}"), t["answer"]) == 1.0


def test_the_optimizer_names_the_mistakes_the_runs_show_and_edits_for_one() -> None:
    assert stand_ins.mistakes("7 + 3 * 4", "19", "I get 40.") == ["wordy", "precedence"]
    assert stand_ins.mistakes("7 / 2 - 1", "2.50", "2") == ["decimals"]
    assert stand_ins.mistakes("7 / 2 * 3", "10.50", "10") == ["decimals"]
    assert stand_ins.mistakes("7 + 3", "10", "10") == []
    # APO's own critique prompt, with runs rendered as APO renders them from the recorded call spans
    shown = [run("7 + 3 * 4", "19", "40"), run("8 - 2 * 3", "2", "18"), run("7 + 3", "10", "10")]
    critique = stand_ins.optimizer(CRITIQUE_PROMPT.substitute(template="Do {expression}.", examples=render(shown)))
    assert critique.startswith("- 2 of 3 runs evaluated in reading order (`7 + 3 * 4` got '40', expected 19)")
    edited = stand_ins.optimizer(EDIT_PROMPT.substitute(template="Do {expression}.", critique=critique))
    assert edited == f"Do {{expression}}. {stand_ins.INSTRUCTIONS['precedence']}"


def run(expression: str, answer: str, reply: str) -> Example:
    response = json.dumps(stand_ins.completion(stand_ins.TASK_MODEL, reply))
    trace = f"openai.chat.completions.create {json.dumps({'voltbus.llm.response': response})}"
    return Example({"expression": expression, "answer": answer}, "succeeded", reward(reply, answer), trace)
