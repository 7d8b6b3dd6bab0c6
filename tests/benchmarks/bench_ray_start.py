"""How long 2 learner ranks take to start and meet (gloo process group, one barrier) under torchrun and under Ray.

Run: ``python -m tests.benchmarks.bench_ray_start [--repeats 3]`` (needs the ray extra). Three sides, each the median
of ``--repeats`` fresh launches, wall time from the launch to every rank gone: ``torchrun --standalone
--nproc-per-node 2``; the Ray launcher starting its own local Ray (``ray.address`` unset: ``ray.init`` and
``ray.shutdown`` included); the Ray launcher joining a Ray already running (placement group, actors, process group).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch.distributed as dist

from voltbus.services.learner.grpo import ranks
from voltbus.services.learner.raylaunch import run_ranks
from voltbus.services.settings import LearnerSettings, RaySettings, TorchrunEnvironment

HERE = "tests.benchmarks.bench_ray_start"


def meet() -> None:
    """One rank: join the process group, wait for the others at a barrier, leave."""
    ranks.start(TorchrunEnvironment(), LearnerSettings())
    dist.barrier()
    dist.destroy_process_group()


def timed(run: Callable[[], object], repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def script(*args: str) -> Callable[[], object]:
    return lambda: subprocess.run([sys.executable, *args], check=True, capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--side", choices=["meet", "ray"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.side == "meet":
        meet()
        return
    if options.side == "ray":
        run_ranks(RaySettings(ranks=2), meet, lambda line: None)
        return
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", HERE, "--side", "meet"]
    print(f"torchrun, 2 ranks: {timed(script(*torchrun), options.repeats):.1f} s")
    print(f"Ray, local Ray started and stopped: {timed(script('-m', HERE, '--side', 'ray'), options.repeats):.1f} s")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20)
    try:
        joined = timed(lambda: run_ranks(RaySettings(ranks=2), meet, lambda line: None), options.repeats)
        print(f"Ray, joining a running Ray: {joined:.1f} s")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
