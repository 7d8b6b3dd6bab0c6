"""examples/smollm2_format on SmolLM2-135M-Instruct itself, with a tiny budget: ``run.py`` runs one GRPO step
(LoRA) through the whole system, the adapter version is published and serves the validation after it, and every
recorded call is the ChatML chat the agent sent, in ids that decode to the text it read."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from voltbus.services.ops.natsserver import NatsServer

from ..examples.test_smollm2_format import TINY, assert_loop_moved, recorded_calls, run_example

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion


def test_run_py_trains_smollm2_one_step(
    smollm2_dir: Path,
    smollm2: tuple[object, object],
    nats_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    weights = tmp_path / "weights"
    result = run_example([*TINY, "--weights-dir", str(weights)], smollm2_dir, nats_server.url, monkeypatch)
    calls = asyncio.run(recorded_calls(nats_server.url, result["namespace"]))
    assert_loop_moved(result, calls, smollm2[1], weights)
    assert 0.0 <= result["after"]["mean_reward"] <= 1.0
