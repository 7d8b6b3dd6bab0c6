"""The caller's CPU and wall time per ``query_rollouts`` (Agent Lightning's algorithms query per finished rollout),
next to the same call with a new HTTP client per query, as ``query_*`` did before issue 25.

Run: ``python -m tests.benchmarks.bench_store_queries [N]``. A real nats-server (the store's connection) and a real
projector ``/sql`` endpoint over a projection of 20,000 attempts, served from another thread so that the caller's
CPU (``time.thread_time``) is the client's alone; sides alternate, medians of 3 rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from tests.benchmarks.bench_refresh import filled
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.projector import app as projector_app
from voltbus.services.projector.projector import PROJECTION_VERSION, Projector
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import BusSettings, NatsSettings, ProjectorSettings, Settings
from voltbus.store import Store, connect

TOKEN = "bench-token"


async def timed(n: int, call: Callable[[int], Awaitable[object]]) -> tuple[float, float]:
    """(CPU ms of this thread, wall ms) per call over ``n`` calls."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for i in range(n):
        await call(i)
    return (time.thread_time() - cpu) / n * 1000, (time.perf_counter() - wall) / n * 1000


def fresh_client_each(store: Store) -> Callable[[int], Awaitable[object]]:
    """``query_rollouts`` with a new HTTP client per call (what every ``query_*`` did before)."""

    async def call(i: int) -> object:
        try:
            return await store.query_rollouts(rollout_id_in=[f"ro-{i}"])
        finally:
            await store._close_http()

    return call


@contextlib.contextmanager
def projector_thread(path: Path) -> Iterator[str]:
    """The projector's ``/sql`` over ``path``, served by its own event loop in another thread; yields its URL."""
    ready, stop, where = threading.Event(), threading.Event(), []
    projector = Projector(path)
    settings = Settings(projector=ProjectorSettings(db=path, token=TOKEN))
    app = projector_app.build_app(settings, projector, projector_app.Progress(projector))

    async def serve() -> None:
        async with serving(app, free_port(), lifespan="off") as url:
            where.append(url)
            ready.set()
            await asyncio.to_thread(stop.wait)

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the projector endpoint did not start within 60 s")
        yield where[0]
    finally:
        stop.set()
        thread.join(30)
        projector.close()


async def main(n: int) -> dict[str, tuple[float, float]]:
    """Print and return the median (CPU ms, wall ms) per query of each side."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.duckdb"
        with filled(path, 20_000) as made:
            made.execute("INSERT OR IGNORE INTO projection_meta VALUES ('version', ?)", [str(PROJECTION_VERSION)])
        server = NatsServer(BusSettings(data_dir=Path(tmp) / "nats", port=0, monitor_port=0), 1024 * 1024).start()
        try:
            with projector_thread(path) as url:
                store = await connect(settings=NatsSettings(url=server.url), projector_url=url, projector_token=TOKEN)
                try:
                    sides = {
                        "query_rollouts": lambda i: store.query_rollouts(rollout_id_in=[f"ro-{i}"]),
                        "a new client per query": fresh_client_each(store),
                    }
                    rounds: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
                    for r in range(3):
                        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                            await timed(20, sides[name])  # warm up
                            rounds[name].append(await timed(n, sides[name]))
                finally:
                    await store.close()
        finally:
            server.stop()
    medians = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in rounds.items()}
    base = medians["a new client per query"][0]
    for name, (cpu, wall) in medians.items():
        print(f"{name:24} CPU {cpu:6.2f} ms/query  wall {wall:6.2f} ms/query  CPU vs baseline {cpu / base:5.0%}")
    return medians


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
