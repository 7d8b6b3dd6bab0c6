"""``voltbus apo``: the APO learner as its own process against a running system (runners and projector
in the test's process, a real nats-server, the stub critic of test_apo.py), and its input errors."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from voltbus.schemas.training import RunFinished, StepCompleted
from voltbus.services.settings import NatsSettings, Settings
from voltbus.trainer.system import local_system

from .test_apo import MARKER, SEED, TASKS, Critic, good_critic, run_state, template_agent  # noqa: F401

VOLTBUS = [sys.executable, "-c", "from voltbus.cli import main; main()"]


def inputs(tmp_path: Path) -> list[str]:
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    (tmp_path / "val.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS[:4]))
    (tmp_path / "prompt.txt").write_text(SEED.template + "\n")
    paths = ["--tasks", str(tmp_path / "tasks.jsonl"), "--val-tasks", str(tmp_path / "val.jsonl")]
    return paths + ["--prompt-file", str(tmp_path / "prompt.txt")]


async def voltbus(*args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *VOLTBUS, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=240)
    return proc.returncode or 0, out.decode()


async def test_voltbus_apo_searches_against_running_runners(
    nats_settings: NatsSettings,
    good_critic: Critic,  # noqa: F811
    tmp_path: Path,
    monkeypatch,
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    shape = ["--rounds", "2", "--beam-width", "2", "--branch-factor", "2", "--val-batch-size", "3"]
    args = ["apo", *inputs(tmp_path), "--critic-url", good_critic.url, "--critic-model", "stub", "--run-id", "apo-cli"]
    async with local_system(Settings(nats=nats_settings), template_agent, n_runners=8) as s:
        assert s.projector.db.parent.parent == scratch and s.projector.db.is_file()
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLTBUS_")} | {
            "VOLTBUS_NATS__URL": s.nats.url,
            "VOLTBUS_NATS__NAMESPACE": s.nats.namespace,
            "VOLTBUS_PROJECTOR__URL": s.projector.url,
        }
        code, out = await voltbus(*args, *shape, "--gradient-batch-size", "2", env=env)
        assert code == 0, out
        assert "validation 0.200 -> 1.000" in out and MARKER in out
        again, said = await voltbus(*args, env=env)  # the run ended: refused, said why
        assert again == 1 and "already succeeded" in said, said
        bad = tmp_path / "resources.json"
        bad.write_text('{"llm": {"resource_type": "nope"}}')
        refused, why = await voltbus("apo", *inputs(tmp_path), "--resources", str(bad), "--run-id", "x", env=env)
        assert refused == 1 and "voltbus: error: --resources" in why and "Traceback" not in why, why
    assert list(scratch.iterdir()) == []  # the system's scratch projection is gone with it (the log keeps it all)
    events, latest = await run_state(nats_settings, "apo-cli")
    assert [e.step for e in events if isinstance(e, StepCompleted)] == [0, 1]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "succeeded"
    assert MARKER in latest.resources["prompt_template"].template
