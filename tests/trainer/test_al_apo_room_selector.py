"""Agent Lightning v0.3.0's APO example (examples/apo: the room selector agent, ``APO[T](async_openai_client, ...)``
and ``Trainer(algorithm=..., n_runners=..., initial_resources=..., adapter=...)``) through voltbus with the import
lines changed, on a real nats-server; every model (task model, judge, critic) is a scripted OpenAI-compatible server,
the outer edge. The record is checked in SQL, in a projection rebuilt from the log."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import cast

import duckdb
import pytest

from voltbus.services.projector.client import rebuild
from voltbus.services.settings import NatsSettings, Settings

HERE = Path(__file__).parent / "al_apo"


class TraceToMessages:
    """Stands in for ``agentlightning.adapter.TraceToMessages`` (``voltbus.adapter`` is another change of issue 26):
    an adapter object ``Trainer`` receives from the example."""


@pytest.fixture
def room_selector_env(monkeypatch: pytest.MonkeyPatch, nats_settings: NatsSettings):
    """The example's environment: OPENAI_* at the scripted models, VOLTBUS_NATS__* at the test bus, its folder."""
    from .al_apo.scripted_llm import ScriptedLLM

    with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
        monkeypatch.setenv("VOLTBUS_NATS__URL", nats_settings.url)
        monkeypatch.setenv("VOLTBUS_NATS__NAMESPACE", nats_settings.namespace)
        monkeypatch.chdir(HERE)  # load_room_tasks() opens room_tasks.jsonl in the working directory
        monkeypatch.syspath_prepend(str(HERE))
        yield llm
    sys.modules.pop("room_selector", None)


def run_room_selector_apo() -> object:
    """AL's room_selector_apo.py ``main()``, its imports changed (setup_logging and the APO log file left out)."""
    from openai import AsyncOpenAI
    from room_selector import RoomSelectionTask, load_room_tasks, prompt_template_baseline, room_selector

    from voltbus import Trainer  # was: from agentlightning import Trainer, setup_logging
    from voltbus.algorithm.apo import APO  # was: from agentlightning.algorithm.apo import APO

    def load_train_val_dataset() -> tuple[list[RoomSelectionTask], list[RoomSelectionTask]]:
        dataset_full = load_room_tasks()
        train_split = len(dataset_full) // 2
        dataset_train = [dataset_full[i] for i in range(train_split)]
        dataset_val = [dataset_full[i] for i in range(train_split, len(dataset_full))]
        return cast(list[RoomSelectionTask], dataset_train), cast(list[RoomSelectionTask], dataset_val)

    openai_client = AsyncOpenAI()

    algo = APO[RoomSelectionTask](
        openai_client,
        val_batch_size=10,
        gradient_batch_size=4,
        beam_width=2,
        branch_factor=2,
        beam_rounds=2,
        _poml_trace=True,
    )
    trainer = Trainer(
        algorithm=algo,
        n_runners=8,
        initial_resources={"prompt_template": prompt_template_baseline()},
        adapter=TraceToMessages(),
    )
    dataset_train, dataset_val = load_train_val_dataset()
    trainer.fit(agent=room_selector, train_dataset=dataset_train, val_dataset=dataset_val)
    return algo


@pytest.mark.timeout(300)
def test_al_room_selector_apo_runs_with_the_import_changed(room_selector_env, nats_settings: NatsSettings, tmp_path):
    from .al_apo.scripted_llm import MARKER

    llm = room_selector_env
    algo = run_room_selector_apo()
    best = algo.get_best_prompt()  # type: ignore[attr-defined]
    result = algo.result  # type: ignore[attr-defined]

    assert MARKER in best.template and best.engine == "f-string"
    assert result["before"] == pytest.approx(1 / 6) and result["after"] == pytest.approx(1.0)  # s11 only, then all
    # AL's two models with AL's defaults: critiques by gpt-5-mini, edits by gpt-4.1-mini (the agent's judge too)
    assert llm.calls["critique"] == llm.models["gpt-5-mini"] == 2 * 2 * 2
    assert llm.models["gpt-4.1-mini"] == llm.calls["edit"] + llm.calls["judge"]
    db = tmp_path / "apo.duckdb"
    asyncio.run(rebuild(Settings(nats=nats_settings), db, lambda _: None))
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT r.rollout_id, r.status, r.mode, r.resources_id, x.value, "
            "list(s.name ORDER BY s.start_time) AS calls "
            "FROM rollouts r JOIN rewards x USING (rollout_id) "
            "JOIN spans s ON s.rollout_id = r.rollout_id AND s.name LIKE 'openai.chat.completions.%' "
            "GROUP BY ALL"
        ).fetchall()
        total = con.execute("SELECT count(*) FROM rollouts").fetchone()[0]  # type: ignore[index]
        answers = con.execute(
            "SELECT s.attributes->>'voltbus.llm.response' FROM spans s WHERE s.name = 'openai.chat.completions.create' "
            "AND s.attributes->>'voltbus.llm.request' LIKE '%\"tools\"%'"
        ).fetchall()
        versions = con.execute(
            "SELECT DISTINCT r.resources_id FROM rollouts r WHERE r.resources_id LIKE $run || ':%'",
            {"run": result["run_id"]},
        ).fetchall()
    # every rollout succeeded with a reward and its three model calls: tool call, answer, judge (structured output)
    assert len(rows) == total == sum(llm.calls[k] for k in ("judge",)) > 0
    calls = ["openai.chat.completions.create", "openai.chat.completions.create", "openai.chat.completions.parse"]
    assert all(status == "succeeded" and names == calls for _, status, _, _, _, names in rows)
    assert {mode for _, _, mode, _, _, _ in rows} == {"train", "val"}
    # the tool call is kept in the recorded response
    assert answers and all("get_rooms_and_availability" in json.loads(a)["choices"][0]["message"]["tool_calls"][0]
                           ["function"]["name"] for (a,) in answers)  # fmt: skip
    # rollouts ran pinned to the run's versions: the seed and the edited templates
    assert len(versions) >= 3
    val_rewards = {res: [] for (res,) in versions}
    for _, _, mode, res, value, _ in rows:
        if mode == "val":
            val_rewards[res].append(value)
    assert max(sum(v) / len(v) for v in val_rewards.values() if v) == pytest.approx(1.0)
