"""The coordinator's start against a big log (e.g. ``synthetic_log.py``'s): time and CPU to "caught up" with
snapshots off (the whole control stream folded), on a first start that writes a snapshot, and on a start from it.

    .venv/bin/python -m tests.benchmarks.bench_coordinator_start --dir /tmp/synth100k [--queued 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import time
from pathlib import Path

from tests.benchmarks.bench_al_pattern import tree_cpu
from voltbus.services.ops.natsserver import NatsServer
from voltbus.services.settings import BusSettings, NatsSettings

VOLTBUS = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "voltbus")
CAUGHT_UP = re.compile(r"caught up at control seq (\d+)(?: \(from snapshot seq (\d+)\) in ([\d.]+)s)?")


def start(voltbus: str, url: str, every: float, log: Path) -> tuple[subprocess.Popen[bytes], float]:
    env = {**os.environ, "VOLTBUS_NATS__URL": url, "VOLTBUS_COORDINATOR__SNAPSHOT_EVERY_S": str(every)}
    out = log.open("wb")
    return subprocess.Popen([voltbus, "coordinator"], env=env, stdout=out, stderr=out), time.monotonic()


def until(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float = 1800) -> re.Match[str]:
    """The first match of ``pattern`` in the process's log (polled every 50 ms: a measurement, not a test)."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.search(pattern, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"the coordinator exited with {proc.returncode}: see {log}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {pattern!r} in {log} after {timeout}s")
        time.sleep(0.05)


def measure(voltbus: str, server: NatsServer, every: float, log: Path, snapshot: bool) -> dict[str, object]:
    """Start a coordinator, time it to "caught up" (wall, its CPU, the server's CPU); with ``snapshot``, wait for
    its first snapshot; stop it."""
    nats_cpu = tree_cpu(server.proc.pid)
    proc, started = start(voltbus, server.url, every, log)
    try:
        line = until(log, CAUGHT_UP.pattern, proc)
        wall, cpu, nats = time.monotonic() - started, tree_cpu(proc.pid), tree_cpu(server.proc.pid) - nats_cpu
        row: dict[str, object] = {"voltbus": voltbus, "snapshot_every_s": every, "start_to_caught_up_s": round(wall, 2),
                                  "coordinator_cpu_s": round(cpu, 2), "nats_cpu_s": round(nats, 2),
                                  "control_seq": int(line[1]), "from_snapshot_seq": int(line[2] or 0),
                                  "fold_s": float(line[3] or 0)}  # fmt: skip
        if snapshot:
            written = until(
                log, r"coordinator snapshot at control seq \d+: \d+ rollouts, (\d+) bytes in ([\d.]+)s", proc
            )
            row["snapshot_bytes"], row["snapshot_write_s"] = int(written[1]), float(written[2])
        return row
    finally:
        proc.terminate()
        proc.wait(60)


async def enqueue(url: str, count: int) -> None:
    """``count`` unfinished (queued) rollouts at the end of the log."""
    from voltbus.store import connect

    store = await connect(settings=NatsSettings(url=url))
    try:
        for start in range(0, count, 500):
            await asyncio.gather(*(store.enqueue_rollout({"bench": n}) for n in range(start, min(count, start + 500))))
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="a synthetic log's directory (its js/ is used)")
    parser.add_argument("--queued", type=int, default=0, help="first enqueue this many unfinished rollouts")
    parser.add_argument("--baseline", default=None, help="another voltbus executable to time first (e.g. main's)")
    parser.add_argument("--every", type=float, default=2.0, help="snapshot_every_s of the snapshotting starts")
    opts = parser.parse_args()
    server = NatsServer(BusSettings(data_dir=opts.dir / "js", port=0), NatsSettings().max_payload).start(60)
    rows = []
    try:
        if opts.queued:
            asyncio.run(enqueue(server.url, opts.queued))
        if opts.baseline:
            rows.append(measure(opts.baseline, server, 0, opts.dir / "coordinator-baseline.log", False))
        rows.append(measure(VOLTBUS, server, 0, opts.dir / "coordinator-off.log", False))
        rows.append(measure(VOLTBUS, server, opts.every, opts.dir / "coordinator-first.log", True))
        rows.append(measure(VOLTBUS, server, opts.every, opts.dir / "coordinator-snapshot.log", False))
    finally:
        server.stop()
    for row in rows:
        print(json.dumps(row), flush=True)
    print(json.dumps({"loadavg": os.getloadavg()}))


if __name__ == "__main__":
    main()
