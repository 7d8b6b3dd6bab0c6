"""Learner update time on 2 ranks (torchrun, gloo) against 1 rank, on the same batch, and how far their weights end.

Run: ``python -m tests.benchmarks.bench_ranks`` (the tiny model) or ``--model-dir DIR``; ``--help``. Each side runs
``tests/services/learner/ranks_step.py`` in fresh processes: 1 rank with as many torch threads as 2 ranks have in
all (``--threads``, default 2: this machine's cores), 2 ranks of ``--threads / 2`` each, and 1 rank with half the
threads (the per-core view). Each does ``--steps`` updates (``objective.update``, CPU policy) on the same rows; the
first is a warm-up, the rest are timed (median). Then the max and mean ``|w2 - w1|`` after those steps (with
``--lora N``: of the adapters).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import load_file

from tests.benchmarks.bench_eventlog import CSV_PATH, Figure, write_csv
from tests.services.learner.ranks_step import differences, run_step
from voltbus.model import build_tiny_model, build_tokenizer, save_model_dir


@dataclass
class Options:
    model_dir: Path | None = None
    rows: int = 32
    extra: int = 120
    steps: int = 4
    threads: int = 2
    lora: int = 0
    csv: bool = True


def side(model_dir: Path, out: Path, ranks: int, threads: int, options: Options) -> tuple[float, dict]:
    """Median seconds per timed update, and rank 0's report."""
    more = {"repeats": options.steps, "extra": options.extra, "threads": threads, "lora": options.lora}
    report = run_step(model_dir, out, ranks, options.rows, 1, 0.0, **more)
    return statistics.median(report["seconds"][1:] or report["seconds"]), report


def run(options: Options) -> Figure:
    """The three sides; one figure (updates/s on 2 ranks, on 1 rank with the same threads; note: the rest)."""
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as scratch:
        root = Path(scratch)
        model_dir = options.model_dir or save_model_dir(build_tiny_model(0), build_tokenizer(), root / "tiny")
        half = max(options.threads // 2, 1)
        one, one_report = side(model_dir, root / "one", 1, options.threads, options)
        two, two_report = side(model_dir, root / "two", 2, half, options)
        one_half, _ = side(model_dir, root / "half", 1, half, options)
        apart = differences(load_file(one_report["saved"]), load_file(two_report["saved"]))
    tokens = int(one_report["stats"]["tokens"])
    adapter = f"LoRA rank {options.lora}, " if options.lora else ""
    note = (
        f"{adapter}{options.rows} rows, {tokens} trained tokens; 1 rank x {options.threads} threads {one:.3f}s, "
        f"2 ranks x {half} {two:.3f}s, 1 rank x {half} {one_half:.3f}s; after {options.steps} steps "
        f"max |w2-w1| {float(apart.max()):.2e}, mean {float(apart.mean()):.2e}; loss "
        f"{one_report['stats']['loss']:.6f} vs {two_report['stats']['loss']:.6f}"
    )
    name = "learner_update_2_ranks" + ("_lora" if options.lora else "")
    figure = Figure(name, options.steps, 1 / two, None, None, 1 / one, None, None, note)
    print(f"learner update: 2 ranks {two:.3f}s vs 1 rank {one:.3f}s -> {one / two:.2f}x ({note})")
    print(json.dumps({"one_s": one, "two_s": two, "one_half_s": one_half, "max_diff": float(apart.max())}))
    if options.csv:
        write_csv(CSV_PATH, [figure])
    return figure


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Options()
    p.add_argument("--model-dir", type=Path, default=None, help="a model directory (default: the tiny model)")
    for name in ("rows", "extra", "steps", "threads", "lora"):
        p.add_argument(f"--{name}", type=int, default=getattr(defaults, name))
    p.add_argument("--no-csv", action="store_true", help="do not append to tests/benchmarks/results.csv")
    args = p.parse_args(argv)
    run(Options(**{k: v for k, v in vars(args).items() if k != "no_csv"}, csv=not args.no_csv))


if __name__ == "__main__":
    main()
