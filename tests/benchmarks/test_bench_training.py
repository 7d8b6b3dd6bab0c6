"""The training-tables benchmark under pytest (opt-in: ``pytest -m bench tests/benchmarks -k training``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import bench_training

pytestmark = pytest.mark.bench


@pytest.mark.timeout(600)
async def test_bench_training(tmp_path: Path) -> None:
    """Training projection calls/s and finished-to-visible lag vs the projector without them: prints, appends rows."""
    figures = await bench_training.run(bench_training.Options(), tmp_path)
    assert {"train_project", "train_reproject", "train_lag"} <= {f.case for f in figures}
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f
