"""The benchmarks under pytest (opt-in: ``pytest -m bench tests/benchmarks``); no speed thresholds (R29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import (
    bench_control,
    bench_eventlog,
    bench_feed,
    bench_gateway,
    bench_parser,
    bench_projector,
    bench_refresh,
    bench_runner,
    bench_spans,
    bench_sql,
)

pytestmark = pytest.mark.bench


@pytest.mark.timeout(600)
async def test_bench_eventlog(tmp_path: Path) -> None:
    """The default event-log run: prints the table and appends its rows to results.csv."""
    figures = await bench_eventlog.run(bench_eventlog.Options(), tmp_path / "nats")
    cases = {f.case for f in figures}
    assert {"append_seq", "append_c32", "append_many", "spans", "replay_control", "replay_spans"} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f


@pytest.mark.timeout(600)
async def test_bench_control(tmp_path: Path) -> None:
    """The default control-plane run (enqueue, claim, complete): prints the table, appends rows to results.csv."""
    figures = await bench_control.run(bench_control.Options(), tmp_path / "nats")
    cases = {f.case for f in figures}
    assert {"enqueue", "claim_c1", "claim_c8", "claim_c32", "complete_c1", "complete_c8", "complete_c32"} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f


async def test_bench_parser() -> None:
    """The feed's parser next to nats-py's on the same reads (every message counted by both)."""
    (figure,) = await bench_parser.run(messages=2000, reps=2)
    assert figure.events == 2000 and figure.rate > 0 and figure.raw_rate > 0


async def test_bench_feed() -> None:
    """The feed on the public path, on sinks, with the sink parser, and a FastStream consumer: each read it all."""
    figures = await bench_feed.run(control=500, spans=500, reps=1)
    assert set(figures) == {(s, m) for s in ("control", "spans") for m in ("read", "decoded")}
    assert all(set(us) >= set(bench_feed.SIDES) and min(us.values()) > 0 for us in figures.values())
    assert all("faststream" in us for (_, mode), us in figures.items() if mode == "decoded")


def test_bench_spans() -> None:
    """A runner's span conversion next to encoding alone: every span of the agent converted."""
    (figure,) = bench_spans.run(rollouts=20, reps=2)
    assert figure.case == "flush_convert" and figure.events > 20 and 0 < figure.rate < figure.raw_rate


def test_bench_refresh() -> None:
    """A training refresh in a bigger projection next to a smaller one (every attempt's telemetry found by both)."""
    figures = bench_refresh.run(attempts=5000, small=1000, reps=2)
    assert [f.case for f in figures] == ["refresh_late", "refresh_again_late"]
    assert all(f.rate > 0 and f.raw_rate > 0 for f in figures)


@pytest.mark.timeout(600)
async def test_bench_projector(tmp_path: Path) -> None:
    """The default projector run (ingest, replay, publish-to-SQL lag): prints tables, appends rows to results.csv."""
    figures = await bench_projector.run(bench_projector.Options(), tmp_path)
    cases = {f.case for f in figures}
    assert {"project_spans", "project_control", "replay", "lag_100ms", "lag_20ms"} <= cases
    assert {"project_spans_steady", "project_control_steady"} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f


@pytest.mark.timeout(900)
async def test_bench_runner(tmp_path: Path) -> None:
    """AL's store benchmark (queue, batch; the queue at 8 and 32 in flight) on runner processes, next to no store:
    prints, appends to results.csv."""
    bench_runner.quiet_otel()
    figures = await bench_runner.run(bench_runner.Options(), tmp_path)
    cases = {f.case for f in figures}
    assert {"al_queue", "al_queue_spans", "al_batch", "al_batch_spans", "al_queue_c8", "al_queue_c32"} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f
        if f.case.endswith("_spans"):
            assert "lost 0 of" in f.note and "failed checks 0" in f.note, f.note  # correctness, not speed


@pytest.mark.timeout(600)
async def test_bench_gateway(tmp_path: Path) -> None:
    """Gateway overhead vs the stub engine directly (1/16/64 concurrent, streamed and not): prints, appends rows."""
    figures = await bench_gateway.run(bench_gateway.Options(), tmp_path)
    cases = {f.case for f in figures}
    assert {f"gw_{s}c{n}" for s in ("", "stream_") for n in (1, 16, 64)} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f


@pytest.mark.timeout(600)
async def test_bench_inference(tmp_path: Path) -> None:
    """CPU inference server tokens/s at 1/16/64 concurrent requests vs raw model.generate: prints, appends rows."""
    from tests.benchmarks import bench_inference

    figures = await bench_inference.run(bench_inference.Options(), tmp_path)
    cases = {f.case for f in figures}
    assert {"server_c1", "server_c16", "server_c64", "server_n16", "loop_b1", "loop_b64"} <= cases
    for f in figures:
        assert f.events > 0 and f.rate > 0 and f.raw_rate > 0, f


@pytest.mark.timeout(600)
def test_bench_learner() -> None:
    """Learner update throughput vs a plain torch loop of the same model: prints, appends a row to results.csv."""
    from tests.benchmarks import bench_learner

    [figure] = bench_learner.run(bench_learner.Options(steps=2, reps=1))
    assert figure.events > 0 and figure.rate > 0 and figure.raw_rate > 0


@pytest.mark.timeout(600)
async def test_bench_sql() -> None:
    """SQL latency with the endpoint's guards on, next to a plain cursor: prints the table."""
    figures = await bench_sql.run(attempts=5_000, queries=100, reps=1)
    assert {f.case for f in figures} == {"checked_point", "endpoint_point", "checked_group", "endpoint_group"}
    assert all(f.rate > 0 and f.raw_rate > 0 for f in figures)


@pytest.mark.timeout(600)
async def test_bench_store_queries() -> None:
    """The caller's CPU per query_rollouts next to a new HTTP client per query: prints the table."""
    from tests.benchmarks import bench_store_queries

    medians = await bench_store_queries.main(30)
    assert set(medians) == {"query_rollouts", "a new client per query"}
    assert all(cpu > 0 and wall > 0 for cpu, wall in medians.values())


@pytest.mark.timeout(600)
async def test_bench_al_pattern() -> None:
    """Agent Lightning's algorithm pattern on voltbus, a small queue run per runner set-up (AL's side needs its own
    venv: ``--al-python``), and the no-store ceiling; every rollout checked as AL checks it."""
    from dataclasses import replace

    from tests.benchmarks import bench_al_pattern
    from tests.benchmarks.al_pattern import SHAPES

    shape = replace(SHAPES["c"], rollouts=64, batch=16, in_flight=32)
    for procs, slots, tag in ((1, shape.runners, "runners"), (2, bench_al_pattern.slots_of(shape), "slots")):
        result = await bench_al_pattern.voltbus_side(shape, 0.2, procs, slots, tag)
        assert result.rollouts == 64 and result.bad == 0 and result.spans > 64 * 3, result
    baseline = await bench_al_pattern.no_store(shape, 8)
    assert baseline.rollouts == 64 and baseline.rate > 0
