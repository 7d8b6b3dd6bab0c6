"""DuckDB checkpoints of primary-key indexes over the store's time-ordered ids against random ids (issue 25,
BENCHMARKS.md "Ids that sort by time"): ``--tables`` tables of ``--keys`` keys each, then rounds of 50 commits of
130 new keys per table (about 6,500 rollouts, what fills the projector's 256 MiB log at 1,000,000 rollouts), each
round closed by a ``CHECKPOINT`` on a freshly opened file (indexes not yet in memory, as after a start).

    python -m tests.benchmarks.bench_id_order [--keys 1000000 --tables 4 --rounds 3 --dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from voltbus.services.clients.store.base import TIME_HEX

KEYS = {
    "random": "'ro-' || substr(md5(i::VARCHAR), 1, 18)",  # 18 random hex digits
    "ordered": f"'ro-' || lpad(to_hex(1700000000 + i), {TIME_HEX}, '0') || substr(md5(i::VARCHAR), 1, 8)",
}
CONFIG = {"checkpoint_threshold": "16GB", "memory_limit": "1GiB", "threads": 1}


def run(kind: str, folder: Path, keys: int, tables: int, rounds: int) -> dict[str, float]:
    """Build the tables, then time the rounds' checkpoints; the file's size at the end."""
    path, key = folder / f"{kind}.duckdb", KEYS[kind]
    with duckdb.connect(str(path), config=CONFIG) as con:
        for n in range(tables):
            con.execute(f"CREATE TABLE t{n} (id VARCHAR PRIMARY KEY, v INTEGER)")
            con.execute(f"INSERT INTO t{n} SELECT {key}, i::INTEGER FROM range({keys}) r(i)")
        con.execute("CHECKPOINT")
    built, walls, cpus, first = path.stat().st_size, [], [], keys
    for _ in range(rounds):
        with duckdb.connect(str(path), config=CONFIG) as con:
            for _ in range(50):
                con.execute("BEGIN")
                for n in range(tables):
                    con.execute(f"INSERT INTO t{n} SELECT {key}, i::INTEGER FROM range({first}, {first + 130}) r(i)")
                con.execute("COMMIT")
                first += 130
            cpu, wall = time.process_time(), time.perf_counter()
            con.execute("CHECKPOINT")
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
    return {"checkpoint_s": statistics.median(walls), "checkpoint_cpu_s": statistics.median(cpus),
            "built_mib": built / 2**20, "file_mib": path.stat().st_size / 2**20}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the two files go (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = {kind: run(kind, Path(tmp), args.keys, args.tables, args.rounds) for kind in ("random", "ordered")}
    for kind, r in results.items():
        print(f"{kind:8} checkpoint {r['checkpoint_s']:.3f} s wall, {r['checkpoint_cpu_s']:.3f} s CPU (median); "
              f"file {r['built_mib']:.0f} MiB built, {r['file_mib']:.0f} MiB after")  # fmt: skip
    ratio = results["random"]["checkpoint_s"] / max(results["ordered"]["checkpoint_s"], 1e-6)
    size = results["random"]["file_mib"] / results["ordered"]["file_mib"]
    print(f"random / ordered: checkpoint {ratio:.1f}x, file {size:.1f}x (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
