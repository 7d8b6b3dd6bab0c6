"""Agent Lightning 0.3.0's side of ``bench_al_pattern``: its store server, its runners, the shared algorithm.

Run by ``bench_al_pattern`` with the Python of an environment holding ``agentlightning==0.3.0`` (``--al-python``),
``PYTHONPATH`` at this repository and ``BENCH_AGL=agentlightning``: ``python -m tests.benchmarks.al_side <shape>
<poll_s> <store port> [rollouts]``. It starts ``agl store`` (the in-memory store, as AL's benchmark does), runs
``Trainer(n_runners=..., strategy={"type": "cs", "managed_store": False}).fit(agent)`` with the pattern as the
algorithm, stops the store and prints one JSON line: the tally, the store's CPU seconds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace

import agentlightning as agl

from tests.benchmarks import store_agent
from tests.benchmarks.al_pattern import SHAPES, Shape, Tally, run_pattern

TICK = os.sysconf("SC_CLK_TCK")


class Pattern(agl.Algorithm):
    """The shared pattern as an Agent Lightning algorithm."""

    def __init__(self, shape: Shape, poll_s: float) -> None:
        self.shape, self.poll_s, self.tally = shape, poll_s, Tally()

    async def run(self, train_dataset=None, val_dataset=None) -> None:  # type: ignore[no-untyped-def]
        self.tally = await run_pattern(agl, self.get_store(), self.shape, self.poll_s)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a live process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    shape_name, poll_s, port = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    shape = replace(SHAPES[shape_name], rollouts=int(sys.argv[4])) if len(sys.argv) > 4 else SHAPES[shape_name]
    store_agent.configure(shape.rounds, shape.sleep_s)
    os.environ["BENCH_MAX_ROUNDS"], os.environ["BENCH_SLEEP_S"] = str(shape.rounds), str(shape.sleep_s)
    server = subprocess.Popen(
        ["agl", "store", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
    )
    url = f"http://127.0.0.1:{port}"
    ready = time.monotonic()
    while True:
        try:
            urllib.request.urlopen(url + "/v1/agl/health", timeout=2).close()
            break
        except OSError:
            if time.monotonic() - ready > 120 or server.poll() is not None:
                raise SystemExit("agl store did not start") from None
            time.sleep(0.2)
    ready_s = time.monotonic() - ready
    algorithm = Pattern(shape, poll_s)
    store = agl.LightningStoreClient(url)
    try:
        trainer = agl.Trainer(
            store=store,
            algorithm=algorithm,
            n_runners=shape.runners,
            strategy={"type": "cs", "managed_store": False},
        )
        trainer.fit(store_agent.agent)
        stats = json.loads(urllib.request.urlopen(url + "/v1/agl/statistics", timeout=10).read())
        store_cpu = cpu_of(server.pid)
    finally:
        asyncio.run(store.close())
        server.terminate()
        server.wait(30)
    print(json.dumps({"tally": algorithm.tally.as_dict(), "store_cpu": store_cpu, "ready_s": ready_s, "stats": stats}))


if __name__ == "__main__":
    main()
