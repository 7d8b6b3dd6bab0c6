"""Training tables: projection throughput (model calls/s) and attempt-finished-to-rows-visible lag, next to the
same projector without the training tables, on one nats-server run as voltbus runs it.

Run: ``python -m tests.benchmarks.bench_training`` (``--help``) or ``pytest -m bench tests/benchmarks -k training``.

The log is filled once through the Store (enqueue, claim, ``update_attempt(succeeded)``) and
``publish_spans``: per attempt 3 gateway ``ModelCalled`` whose prompts extend the previous context
exactly (256-token prompt, 64-token responses, 16-token tool outputs), 3 runner call spans paired with
them by response id, an agent span and a reward span. Cases (voltbus vs raw, alternating, medians):
  train_project    project() both streams into a fresh file       vs  the same with training.refresh skipped
  train_reproject  rebuild() with other adapter settings (what     vs  the same baseline
                   ``voltbus reproject`` runs)
  train_lag        live projector; from each update_attempt       vs  a live projector without training tables:
                   (start) until its training_attempts row          until the attempts row shows ``succeeded``
  diag_adapter     adapt() alone over the stored inputs (pure Python, no DuckDB, no bus)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.bench_eventlog import (
    CSV_PATH,
    Bench,
    Figure,
    Run,
    alternate,
    server_version,
    summarize,
    table,
    write_csv,
)
from tests.benchmarks.bench_eventlog import Options as LogOptions
from tests.benchmarks.bench_training_data import TURNS, NoTraining, fill, lag, stored_inputs
from voltbus.projections.adapter import AdapterSettings, adapt
from voltbus.services.eventlog import EventLog
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector.client import rebuild
from voltbus.services.projector.follow import ends_at, project
from voltbus.services.projector.projector import Projector
from voltbus.services.settings import BusSettings, NatsSettings, Settings

OTHER = AdapterSettings(reward_policy="final_to_last", gamma=0.9, aggregation="call")


@dataclass
class Options:
    """What to run; the defaults (10,200 model calls) keep a whole run near two minutes on two cores."""

    attempts: int = 3400
    batch: int = 2000
    lag_rate: float = 50.0
    lag_seconds: float = 10.0
    reps: int = 3
    csv: Path | None = CSV_PATH


async def timed_project(settings: NatsSettings, path: Path, projector_cls: type[Projector], batch: int) -> Run:
    """project() of both streams to their ends into ``path``; model calls per second."""
    log = await EventLog.connect(settings, name="bench-training")
    projector = projector_cls(path)
    try:
        start = time.perf_counter()
        await project(projector, log, ends=await ends_at(log), batch_size=batch)
        seconds = time.perf_counter() - start
        calls, triplets = projector.con.execute(
            "SELECT count(*), (SELECT count(*) FROM triplets) FROM model_calls"
        ).fetchone()  # type: ignore[misc]
        assert triplets == (calls if projector_cls is Projector else 0), (calls, triplets)
        return Run(calls, seconds)
    finally:
        projector.close()
        await log.close()
        drop(path)


async def timed_reproject(settings: NatsSettings, path: Path, batch: int) -> Run:
    full = Settings(nats=settings)
    full.projector.batch_size = batch
    start = time.perf_counter()
    await rebuild(full, path, lambda _: None, adapter=OTHER, label="reproject")
    seconds = time.perf_counter() - start
    projector = Projector(path, OTHER)
    try:
        calls, rows = projector.con.execute(
            "SELECT count(*), (SELECT count(*) FROM trajectories) FROM model_calls"
        ).fetchone()  # type: ignore[misc]
        assert rows == calls, (calls, rows)  # aggregation "call": one row per call
        return Run(calls, seconds)
    finally:
        projector.close()
        drop(path)


def drop(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


async def run(options: Options, data_dir: Path, echo: Callable[[str], None] = print) -> list[Figure]:
    """Start the server, fill the log, run the cases, print the table, append to the ledger."""
    bus = BusSettings(data_dir=data_dir / "nats", port=0, monitor_port=0)
    server = NatsServer(bus, NatsSettings().max_payload).start()
    echo(f"nats-server {server_version()} at {server.url}, store {data_dir}")
    b = Bench(server, LogOptions(reps=options.reps, csv=None))
    figures: list[Figure] = []
    count = iter(range(1_000_000))
    try:
        t = time.perf_counter()
        settings = b.settings()
        await fill(settings, options.attempts)
        echo(f"  fill: {time.perf_counter() - t:.1f}s, {options.attempts} attempts, {options.attempts * TURNS} calls")
        new = lambda name: data_dir / f"{name}-{next(count)}.duckdb"  # noqa: E731
        baseline = lambda: timed_project(settings, new("base"), NoTraining, options.batch)  # noqa: E731
        vbs, raws = await alternate(
            b, lambda: timed_project(settings, new("train"), Projector, options.batch), baseline
        )
        figures.append(summarize("train_project", vbs, raws, "calls/s; project() with vs without training tables"))
        vbs, raws = await alternate(b, functools.partial(timed_reproject, settings, new("re"), options.batch), baseline)
        figures.append(summarize("train_reproject", vbs, raws, f"calls/s; rebuild() with {OTHER.reward_policy}/call"))
        inputs = await stored_inputs(settings, new("inputs"), options.batch)
        start = time.perf_counter()
        outputs = [adapt(i, AdapterSettings()) for i in inputs]
        adapter = Run(sum(len(o.triplets) for o in outputs), time.perf_counter() - start)
        figures.append(summarize("diag_adapter", [adapter], raws, "adapt() alone, calls/s vs the baseline project()"))
        echo(f"  throughput: {time.perf_counter() - t:.1f}s")
        t = time.perf_counter()
        trained, same_run, n, seconds = await lag(b.settings(), options.lag_rate, options.lag_seconds, new("lag"))
        plain, _, _, plain_seconds = await lag(
            b.settings(), options.lag_rate, options.lag_seconds, new("lag"), NoTraining
        )
        note = f"{options.lag_rate:.0f} attempts/s for {options.lag_seconds:.0f}s; raw = attempts row, no training"
        figures.append(summarize("train_lag", [Run(n, seconds, trained)], [Run(n, plain_seconds, plain)], note))
        note = "the train_lag run: its attempts row (committed with the training rows)"
        same = [Run(n, seconds, same_run)]
        figures.append(summarize("diag_lag_attempt_row", same, [Run(n, plain_seconds, plain)], note))
        echo(f"  lag: {time.perf_counter() - t:.1f}s")
    finally:
        server.stop()
    echo(table(figures))
    if options.csv is not None:
        write_csv(options.csv, figures)
        echo(f"appended {sum(not f.case.startswith('diag_') for f in figures)} rows to {options.csv}")
    return figures


def parse_args(argv: Sequence[str] | None = None) -> Options:
    d = Options()
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_training", description=__doc__.split("\n")[0])
    p.add_argument(
        "--attempts", type=int, default=d.attempts, help=f"stored attempts, {TURNS} calls each (%(default)s)"
    )
    p.add_argument("--batch", type=int, default=d.batch, help="projector batch size (%(default)s)")
    p.add_argument("--lag-rate", type=float, default=d.lag_rate, help="attempts/s in the lag case (%(default)s)")
    p.add_argument("--lag-seconds", type=float, default=d.lag_seconds, help="length of the lag case (%(default)s)")
    p.add_argument("--reps", type=int, default=d.reps, help="runs per side (%(default)s)")
    p.add_argument("--no-csv", action="store_true", help="do not append to results.csv")
    a = p.parse_args(argv)
    return Options(a.attempts, a.batch, a.lag_rate, a.lag_seconds, a.reps, None if a.no_csv else CSV_PATH)


def main(argv: Sequence[str] | None = None) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vb-bench-training-") as tmp:
        asyncio.run(run(parse_args(argv), Path(tmp)))


if __name__ == "__main__":
    main()
