"""The learner's update on 1 rank and on N ranks (``bash .ci/gpu`` on a machine with several GPUs): the same batch,
verl's engine, one process per GPU under ``torchrun`` (NCCL), through ``tests/services/learner/ranks_step.py`` (the
data-parallel test's driver); prints the seconds per update of each and writes them to ``--out``.

Reads ``nvidia-smi -L`` on stdin: with fewer than two GPUs it says it skipped the comparison, and why, and exits 0.
Usage: ``nvidia-smi -L | python .ci/gpu_ranks.py --model DIR [--rows 32] [--repeats 3] [--out gpu-ranks.json]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plan(gpu_list: str) -> tuple[int, str]:
    """How many ranks to compare with one (0: none), from ``nvidia-smi -L``'s output, and what that means."""
    gpus = sum(1 for line in gpu_list.splitlines() if line.startswith("GPU "))
    if gpus < 2:
        return 0, (
            f"ranks: skipped the 1 vs N ranks comparison: nvidia-smi lists {gpus} GPU"
            f"{'' if gpus == 1 else 's'}; data parallel over torchrun's ranks (NCCL) needs 2 or more"
        )
    return gpus, f"ranks: {gpus} GPUs: the learner's update on 1 rank, then on {gpus} ranks (torchrun, NCCL)"


def per_update(report: dict) -> float:
    """Seconds per update, the first (warm-up: compilation, allocator) left out when there were more."""
    seconds = report["seconds"][1:] or report["seconds"]
    return sum(seconds) / len(seconds)


def compare(model: Path, ranks: int, rows: int, repeats: int, backend: str = "verl") -> dict:
    """The update's seconds on 1 rank and on ``ranks`` ranks (verl's engine, the same ``rows`` rows)."""
    sys.path.insert(0, str(ROOT))
    from tests.services.learner.ranks_step import run_step

    figures = {"model": str(model), "rows": rows, "ranks": ranks, "backend": backend}
    with tempfile.TemporaryDirectory() as scratch:
        for n in (1, ranks):
            report = run_step(model, Path(scratch) / f"ranks-{n}", n, rows, 1, 0.0, backend, repeats=repeats)
            figures[f"step_s_{n}_ranks"] = per_update(report)
    return figures


def main(argv: list[str] | None = None, gpu_list: str | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--backend", default="verl", help="the learner's backend (torch: a CPU check, gloo)")
    args = parser.parse_args(argv)
    ranks, message = plan(sys.stdin.read() if gpu_list is None else gpu_list)
    print(message)
    if not ranks:
        return {}
    figures = compare(args.model, ranks, args.rows, args.repeats, args.backend)
    one, many = figures["step_s_1_ranks"], figures[f"step_s_{ranks}_ranks"]
    print(f"ranks: {args.model.name}, {args.rows} rows: {one:.2f} s per update on 1 rank, {many:.2f} s on {ranks} "
          f"ranks ({one / many:.2f}x)")  # fmt: skip
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
