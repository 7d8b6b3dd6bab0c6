"""A newcomer's runner (issue 28): ``--agent room:agent`` from the agent's own folder imports it, and the log
says how each rollout ended."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from voltbus.services.runner.loader import load_agent
from voltbus.services.settings import NatsSettings
from voltbus.store import Store

from .conftest import runner_settings
from .test_runner import AGENTS, run_until_done


def test_an_agent_module_in_the_current_folder_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import voltbus as agl\n\n@agl.rollout\ndef agent(task, prompt_template):\n    return 1.0\n"
    (tmp_path / "room_i28.py").write_text(code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_agent("room_i28:agent") is not None
    assert sys.path[-1] == str(tmp_path)  # searched last: it shadows no installed package


async def test_the_runner_logs_each_rollouts_outcome(
    store: Store, nats_settings: NatsSettings, caplog: pytest.LogCaptureFixture
) -> None:
    good = await store.enqueue_rollout("fine")
    with caplog.at_level(logging.INFO, logger="voltbus.services.runner.app"):
        settings = runner_settings(nats_settings, agents="in-process")
        await run_until_done(settings, f"{AGENTS}:returns_float", store, [good.rollout_id])
        bad = await store.enqueue_rollout("boom")  # queued only now: the first runner could have claimed it
        await run_until_done(settings, f"{AGENTS}:raises", store, [bad.rollout_id])
    lines = [r.getMessage() for r in caplog.records if r.name == "voltbus.services.runner.app"]
    assert any(f"rollout_id={good.rollout_id} attempt=1 worker=" in m and ": succeeded in " in m for m in lines)
    assert any(f"rollout_id={bad.rollout_id} attempt=1" in m and ": failed (ValueError) in " in m for m in lines)
