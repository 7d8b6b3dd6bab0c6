"""``wait_for_rollouts(128 ids, timeout=0)`` on a synthetic log, nats-server alone (no projector): a new client's
first call against its warm calls, for the log's oldest rollouts and its newest (issue 25, BENCHMARKS.md "DuckDB's
memory").

    python -m tests.benchmarks.bench_wait_cold /tmp/synth     # a synthetic_log.py --dir, projected, nothing running
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import duckdb

import voltbus
from tests.conftest import free_port

WAVE = 128


async def timings(url: str, waves: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Per wave: a new client's first call, then the p50 and max of 10 more, in ms."""
    out = {}
    for label, ids in waves.items():
        store = await voltbus.connect(url)
        try:
            start = time.perf_counter()
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
            cold = time.perf_counter() - start
            warm = []
            for _ in range(10):
                start = time.perf_counter()
                await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
                warm.append(time.perf_counter() - start)
        finally:
            await store.close()
        ms = [round(1000 * x) for x in (cold, statistics.median(warm), max(warm))]
        out[label] = {"finished": len(done), "cold_ms": ms[0], "warm_p50_ms": ms[1], "warm_max_ms": ms[2]}
    return out


async def connected(url: str) -> None:
    """Wait until the bus answers."""
    for _ in range(600):
        try:
            await (await voltbus.connect(url)).close()
            return
        except Exception:  # not up yet
            await asyncio.sleep(0.1)
    raise TimeoutError(f"no bus at {url}")


def main() -> None:
    data = Path(sys.argv[1])
    with duckdb.connect(str(data / "projection.duckdb"), read_only=True) as con:
        sql = "SELECT rollout_id FROM rollouts ORDER BY start_time {} LIMIT 256"
        oldest = [r[0] for r in con.execute(sql.format("ASC")).fetchall()]
        newest = [r[0] for r in con.execute(sql.format("DESC")).fetchall()]
    waves = {"oldest": oldest[:WAVE], "oldest 2": oldest[WAVE:], "newest": newest[:WAVE], "newest 2": newest[WAVE:]}
    port = free_port()
    bus = subprocess.Popen(
        [str(Path(sys.executable).with_name("voltbus")), "nats", "--port", str(port), "--data-dir", str(data / "js")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(connected(url))
        print(json.dumps(asyncio.run(timings(url, waves))))
    finally:
        bus.terminate()
        bus.wait()


if __name__ == "__main__":
    main()
