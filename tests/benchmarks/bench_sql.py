"""SQL latency with the endpoint's guards on (issue 24), next to the same query on a plain DuckDB cursor.

    python -m tests.benchmarks.bench_sql [--attempts N] [--queries N] [--reps N]

One projection database of ``--attempts`` ended attempts (``bench_refresh.filled``), opened as the projector opens
it (``SAFETY``: no external access, locked configuration). Cases, each ``--queries`` queries one after another,
sides alternated ``--reps`` times, medians:

  checked_<q>    ``services.projector.sql.query``: the parser check, a READ ONLY transaction rolled back,
                 the timeout timer, the row and byte limits   vs  ``cursor.sql(q)`` read to Arrow
  endpoint_<q>   ``POST /sql`` with the bearer token, Host/Origin/JSON checks, a slot, Arrow IPC back
                 vs  the same query on a plain cursor (the whole HTTP round trip is in the guarded side)

``<q>`` is ``point`` (one attempt by id) or ``group`` (a count per status over every attempt).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import duckdb
import httpx

from tests.benchmarks.bench_eventlog import Figure, Run, summarize, table
from tests.benchmarks.bench_refresh import _id, filled
from voltbus.projections.safety import SAFETY
from voltbus.services.projector import app as projector_app
from voltbus.services.projector.projector import PROJECTION_VERSION, Projector
from voltbus.services.projector.sql import Limits, query
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import ProjectorSettings, Settings

TOKEN = "bench-token"
QUERIES = {
    "point": ("SELECT * FROM attempts WHERE attempt_id = $id", lambda i: {"id": _id("at", i)}),
    "group": ("SELECT status, count(*) AS n FROM attempts GROUP BY status", lambda i: None),
}


def plain(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object] | None) -> None:
    """The baseline: a cursor, the query, its rows as Arrow."""
    cursor = con.cursor()
    try:
        (cursor.sql(sql, params=params) if params else cursor.sql(sql)).to_arrow_table()
    finally:
        cursor.close()


def timed(n: int, one: object) -> Run:
    start, latencies = time.perf_counter(), []
    for i in range(n):
        began = time.perf_counter()
        one(i)  # type: ignore[operator]
        latencies.append(time.perf_counter() - began)
    return Run(n, time.perf_counter() - start, latencies)


async def timed_async(n: int, one: object) -> Run:
    start, latencies = time.perf_counter(), []
    for i in range(n):
        began = time.perf_counter()
        await one(i)  # type: ignore[operator]
        latencies.append(time.perf_counter() - began)
    return Run(n, time.perf_counter() - start, latencies)


async def run(attempts: int = 20_000, queries: int = 300, reps: int = 3) -> list[Figure]:
    """Every case's medians."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.duckdb"
        with filled(path, attempts) as made:  # a projection of this version, not moved aside at open
            made.execute("INSERT OR IGNORE INTO projection_meta VALUES ('version', ?)", [str(PROJECTION_VERSION)])
        projector = Projector(path)
        con, limits = projector.con, Limits()
        settings = Settings(projector=ProjectorSettings(db=path, token=TOKEN))
        queries_ = projector_app.Queries(settings, projector)
        app = projector_app.build_app(settings, projector, projector_app.Progress(projector), queries_)
        figures = []
        try:
            async with serving(app, free_port(), lifespan="off") as url:
                headers = {"Authorization": f"Bearer {TOKEN}"}
                async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                    for name, (sql, params) in QUERIES.items():
                        checked: list[Run] = []
                        endpoint: list[Run] = []
                        raw: list[Run] = []
                        for _ in range(reps):
                            raw.append(timed(queries, lambda i, s=sql, p=params: plain(con, s, p(i))))
                            checked.append(timed(queries, lambda i, s=sql, p=params: query(con, s, limits, p(i))))

                            async def post(i: int, s: str = sql, p: object = params) -> None:
                                answer = await http.post("/sql", json={"sql": s, "params": p(i) or {}})  # type: ignore[operator]
                                answer.raise_for_status()

                            endpoint.append(await timed_async(queries, post))
                        figures.append(summarize(f"checked_{name}", checked, raw))
                        figures.append(summarize(f"endpoint_{name}", endpoint, raw))
        finally:
            queries_.stop()
            projector.close()
    assert SAFETY["enable_external_access"] is False
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attempts", type=int, default=20_000)
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(table(asyncio.run(run(args.attempts, args.queries, args.reps))))


if __name__ == "__main__":
    main()
