"""examples/calc_agent: the Agent Lightning 0.3-style agent runs its 20 tasks through the real system
(its README's command), every fifth label deliberately wrong."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from voltbus.services.settings import NatsSettings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc_agent"


def test_run_gives_the_readme_result(nats_settings: NatsSettings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLTBUS_NATS__URL", nats_settings.url)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "agent", raising=False)
    spec = importlib.util.spec_from_file_location("voltbus_example_calc_run", EXAMPLE / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    result = run.main(nats_settings.namespace)
    assert result["train"] == {"mean_reward": 0.8, "rollouts": 20.0}
    assert "20 rollouts, mean reward 0.80" in (EXAMPLE / "README.md").read_text()
