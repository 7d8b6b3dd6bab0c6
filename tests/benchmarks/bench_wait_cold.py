"""``wait_for_rollouts(128 ids, timeout=0)`` on a synthetic log: a new client's first call against its warm calls, for
the log's oldest rollouts and its newest (issue 25, BENCHMARKS.md "DuckDB's memory"); nats-server alone, or with
``--projector`` a projector of the log's projection beside it, which a new client's first wave is read from
(``services/clients/store/coldwave.py``).

    python -m tests.benchmarks.bench_wait_cold /tmp/synth [--projector]   # a synthetic_log.py --dir, projected
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb

import voltbus
from tests.conftest import free_port

WAVE = 128
VOLTBUS = str(Path(sys.executable).with_name("voltbus"))


async def timings(url: str, projector_url: str, waves: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Per wave: a new client's first call, then the p50 and max of 10 more, in ms."""
    out = {}
    for label, ids in waves.items():
        store = await voltbus.connect(url, projector_url=projector_url)
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


def start_projector(data: Path, url: str) -> tuple[subprocess.Popen[bytes], str]:
    """``voltbus projector`` on the log's projection (nothing left to apply); its URL once it answers."""
    port = free_port()
    env = {
        **os.environ,
        "VOLTBUS_NATS__URL": url,
        "VOLTBUS_PROJECTOR__PORT": str(port),
        "VOLTBUS_PROJECTOR__DB": str(data / "projection.duckdb"),
    }
    with open(data / "projector-bench.log", "wb") as out:
        proc = subprocess.Popen([VOLTBUS, "projector"], env=env, stdout=out, stderr=out)
    projector_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            urllib.request.urlopen(projector_url + "/health", timeout=2).close()
            return proc, projector_url
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, f"no projector: {data / 'projector-bench.log'}"
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="a synthetic_log.py --dir (projected), nothing running on it")
    parser.add_argument("--projector", action="store_true", help="with a projector beside nats-server")
    args = parser.parse_args()
    data: Path = args.data
    with duckdb.connect(str(data / "projection.duckdb"), read_only=True) as con:
        sql = "SELECT rollout_id FROM rollouts ORDER BY start_time {} LIMIT 256"
        oldest = [r[0] for r in con.execute(sql.format("ASC")).fetchall()]
        newest = [r[0] for r in con.execute(sql.format("DESC")).fetchall()]
    waves = {"oldest": oldest[:WAVE], "oldest 2": oldest[WAVE:], "newest": newest[:WAVE], "newest 2": newest[WAVE:]}
    port = free_port()
    bus = subprocess.Popen(
        [VOLTBUS, "nats", "--port", str(port), "--data-dir", str(data / "js")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    projector = None
    try:
        url = f"nats://127.0.0.1:{port}"
        asyncio.run(connected(url))
        projector_url = f"http://127.0.0.1:{free_port()}"  # nothing answers there
        if args.projector:
            projector, projector_url = start_projector(data, url)
        print(json.dumps({"projector": args.projector, **asyncio.run(timings(url, projector_url, waves))}))
    finally:
        for proc in (projector, bus):
            if proc is not None:
                proc.terminate()
                proc.wait(120)


if __name__ == "__main__":
    main()
