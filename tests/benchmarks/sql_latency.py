"""Latency of one small query through the projector's ``/sql``, as this checkout builds the endpoint: run it in two
checkouts (``PYTHONPATH=. python -m tests.benchmarks.sql_latency LABEL``) to compare commits (BENCHMARKS.md,
"SQL endpoint").
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.benchmarks.bench_refresh import filled
from voltbus.services.projector import app as projector_app
from voltbus.services.projector.projector import PROJECTION_VERSION, Projector
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import ProjectorSettings, Settings

SQL = "SELECT * FROM attempts WHERE attempt_id = $id"


async def main(label: str, n: int = 400, warmup: int = 50) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "p.duckdb"
        with filled(path, 20_000) as made:
            made.execute("INSERT OR IGNORE INTO projection_meta VALUES ('version', ?)", [str(PROJECTION_VERSION)])
        projector = Projector(path)
        try:
            settings = Settings(projector=ProjectorSettings(db=path, token="t"))  # type: ignore[call-arg]
        except ValueError:  # a checkout before the token
            settings = Settings(projector=ProjectorSettings(db=path))
        app = projector_app.build_app(settings, projector, projector_app.Progress(projector))
        try:
            async with serving(app, free_port(), lifespan="off") as url:
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer t"}) as http:
                    seconds = []
                    for i in range(n + warmup):
                        began = time.perf_counter()
                        answer = await http.post("/sql", json={"sql": SQL, "params": {"id": f"at-{i}"}})
                        answer.raise_for_status()
                        seconds.append(time.perf_counter() - began)
        finally:
            projector.close()
    ordered = sorted(seconds[warmup:])
    p50, p99 = ordered[len(ordered) // 2] * 1000, ordered[int(len(ordered) * 0.99)] * 1000
    print(f"{label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "this checkout"))
