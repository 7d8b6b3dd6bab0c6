"""examples/smollm2_tools on SmolLM2-135M-Instruct itself, with a tiny budget: 6 multi-turn, tool-calling
conversations through the gateway and one GRPO step; the recorded ids decode to the replies, the trained tokens are
the sampled ones and the turn separators and tool output have mask 0, and the reported prefix-mismatch count is the
one a projection rebuilt from the log holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from voltbus.services.ops.natsserver import NatsServer

from ..examples.test_smollm2_tools import TINY, assert_report, calls_of, run_example

pytestmark = [pytest.mark.smollm2, pytest.mark.timeout(900)]  # the first test may wait for the conversion


def test_run_py_converses_with_tools_on_smollm2_and_reports_mismatches(
    smollm2_dir: Path,
    smollm2: tuple[object, object],
    nats_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = run_example(TINY, smollm2_dir, nats_server.url, monkeypatch)
    calls = calls_of(nats_server.url, result["namespace"])
    stitched = assert_report(result, calls, smollm2[1], nats_server.url, tmp_path / "rebuilt.duckdb")
    assert stitched >= 1 and result["inspected"]["observation_tokens"] > 0  # turns stitched across ChatML separators
    [step] = result["steps"]
    assert step["rollouts_trained"] == 6
    assert result["inspected"]["tool_calls"] >= 1  # SmolLM2 calls the tool in about 23 of 24 first replies
    with capsys.disabled():
        print(f"\nsmollm2_tools: {result['inspected']}")
