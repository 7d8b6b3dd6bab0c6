"""A training refresh late in a long run next to the same refresh early in it: does its cost grow with the tables?

    python -m tests.benchmarks.bench_refresh [--attempts N] [--small N] [--reps N]

Each side is a projection database (the projection's own schema) holding ended attempts with 15 spans and one
reward each, and training rows for all but the latest, made by SQL. Timed (process CPU, median): the projector's
``training.refresh`` of 10 of its latest attempts in a transaction, as the commit that ends them runs it, and then
of the same 10 again, as late telemetry makes it (their old rows are taken away first). Raw = the same in a
database of ``--small`` attempts; the ratio is 100% when a refresh costs as much late in a run as early. No bus:
the database is the part that grows.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import duckdb

from tests.benchmarks.bench_eventlog import Figure, Run, summarize, table
from voltbus.projections import blocks, training
from voltbus.projections.adapter import AdapterSettings

SPANS = 15
KEYS = 10
MAX_REPS = 50
"""Most refreshes per side (the latest ``MAX_REPS * KEYS`` attempts have no training rows yet)."""


def _id(prefix: str, i: int) -> str:
    return f"{prefix}-{hashlib.md5(str(i).encode()).hexdigest()[:12]}"  # the SQL below makes the same ids


def filled(path: Path, attempts: int) -> duckdb.DuckDBPyConnection:
    """A projection database of ``attempts`` ended attempts, their telemetry in stream order."""
    con = duckdb.connect(str(path))
    for block in blocks.load()[0]:
        con.execute(block.sql)
    ids = "substr(md5(i::VARCHAR), 1, 12)"
    of_span = f"substr(md5((i // {SPANS})::VARCHAR), 1, 12)"
    con.execute(
        "INSERT INTO rollouts (rollout_id, status, start_time, attempt_count, last_seq, input, metadata, mode) "
        f"SELECT 'ro-' || {ids}, 'succeeded', i, 1, i, '{{\"q\":1}}', '{{}}', 'train' FROM range(?) t(i)",
        [attempts],
    )
    con.execute(
        "INSERT INTO attempts (rollout_id, attempt_id, sequence_id, status, start_time, last_seq) "
        f"SELECT 'ro-' || {ids}, 'at-' || {ids}, 1, 'succeeded', i, i FROM range(?) t(i)",
        [attempts],
    )
    con.execute(
        "INSERT INTO attempt_activity (rollout_id, attempt_id, last_seen, events, first_seq, last_seq) "
        f"SELECT 'ro-' || {ids}, 'at-' || {ids}, i, {SPANS + 1}, i * {SPANS}, i * {SPANS} + {SPANS} FROM range(?) t(i)",
        [attempts],
    )
    con.execute(
        "INSERT INTO spans (seq, event_id, rollout_id, attempt_id, sequence_id, trace_id, span_id, name, attributes, "
        f"seq_index) SELECT i, 'ev-' || i, 'ro-' || {of_span}, 'at-' || {of_span}, i % {SPANS}, 't', 's' || i, 'span', "
        "'{\"k\":\"' || repeat('x', 200) || '\"}', 0 FROM range(?) t(i)",
        [attempts * SPANS],
    )
    con.execute(
        "INSERT INTO rewards (seq, event_id, rollout_id, attempt_id, value, seq_index) "
        f"SELECT i * {SPANS} + {SPANS}, 'rw-' || i, 'ro-' || {ids}, 'at-' || {ids}, 1.0, 0 FROM range(?) t(i)",
        [attempts],
    )
    older = f"range({attempts - MAX_REPS * KEYS}) t(i)"  # training rows of all but the attempts a run refreshes
    of_call, calls = "substr(md5((i // 3)::VARCHAR), 1, 12)", (attempts - MAX_REPS * KEYS) * 3
    con.execute(
        "INSERT INTO triplets (rollout_id, attempt_id, call_index, call_id, choice_index, settings_id, "
        f"adapter_version, prompt_ids, response_ids) SELECT 'ro-' || {of_call}, 'at-' || {of_call}, i % 3, "
        f"'c' || i, 0, 's', 1, range(200)::INTEGER[], range(100)::INTEGER[] FROM range({calls}) t(i)"
    )
    for name, extra in (("trajectories", ", row_index"), ("training_attempts", "")):
        con.execute(
            f"INSERT INTO {name} (rollout_id, attempt_id{extra}, settings_id, adapter_version) "
            f"SELECT 'ro-' || {ids}, 'at-' || {ids}{', 0' if extra else ''}, 's', 1 FROM {older}"
        )
    con.execute("CHECKPOINT")
    return con


def refreshes(con: duckdb.DuckDBPyConnection, attempts: int, reps: int) -> tuple[list[Run], list[Run]]:
    """``reps`` refreshes of ``KEYS`` attempts each (the latest ones not yet refreshed), one transaction each, and
    then of each the same again (late telemetry: their rows are taken away first)."""
    named = blocks.load()[1]
    runs, again = [], []
    for rep in range(reps):
        keys = [
            (_id("ro", i), _id("at", i)) for i in range(attempts - 1 - rep * KEYS, attempts - 1 - (rep + 1) * KEYS, -1)
        ]
        con.begin()
        start = time.process_time()
        ended = training.refresh(con, named, [], keys, AdapterSettings(), ())
        runs.append(Run(1, time.process_time() - start))
        con.commit()
        assert len(ended) == KEYS, ended
        con.begin()
        start = time.process_time()
        training.refresh(con, named, [], keys, AdapterSettings(), set(keys))
        again.append(Run(1, time.process_time() - start))
        con.commit()
    rows = con.execute(
        "SELECT count(*), sum(spans), sum(rewards) FROM training_attempts WHERE spans IS NOT NULL"
    ).fetchone()
    assert rows == (reps * KEYS, reps * KEYS * SPANS, reps * KEYS), rows  # every attempt's telemetry found, once
    return runs, again


def run(attempts: int = 400_000, small: int = 10_000, reps: int = 7) -> list[Figure]:
    assert reps <= MAX_REPS and small > MAX_REPS * KEYS, (reps, small)
    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        for n in (small, attempts):
            with filled(Path(tmp) / f"{n}.duckdb", n) as con:
                sides[n] = refreshes(con, n, reps)
    note = f"{KEYS} ended attempts refreshed, {attempts:,} stored ({attempts * SPANS:,} spans) vs {small:,}"
    late, early = sides[attempts], sides[small]
    return [
        summarize("refresh_late", late[0], early[0], note),
        summarize("refresh_again_late", late[1], early[1], f"the same {KEYS} again, their old rows taken away first"),
    ]


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.benchmarks.bench_refresh", description=__doc__.split("\n")[0])
    p.add_argument("--attempts", type=int, default=400_000, help="attempts stored late in the run (%(default)s)")
    p.add_argument("--small", type=int, default=10_000, help="attempts stored early in the run (%(default)s)")
    p.add_argument("--reps", type=int, default=7, help="refreshes per side; medians (%(default)s)")
    a = p.parse_args(argv)
    figures = run(a.attempts, a.small, a.reps)
    print(table(figures))
    for f in figures:
        print(f"{f.case}: {1e3 / f.rate:.1f} ms of CPU per refresh late, {1e3 / f.raw_rate:.1f} ms early")


if __name__ == "__main__":
    main()
