"""What the Ray tests run on each rank's actor (importable there: Ray's workers start in this process's directory),
and, run as a script, a launcher to interrupt: ``python -m tests.services.learner.ray_ranks ADDRESS`` holds 2 ranks
that wait until stopped."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from voltbus.services.learner.grpo import ranks
from voltbus.services.learner.raylaunch import run_ranks
from voltbus.services.settings import LearnerSettings, RaySettings, TorchrunEnvironment


def step(model_dir: Path, out: Path, rows: int, epochs: int, kl: float) -> None:
    """``ranks_step.py``'s update on this rank (its argv, set in this actor's own process)."""
    from . import ranks_step

    options = {"rows": rows, "epochs": epochs, "kl": kl, "repeats": 1, "backend": "torch"}
    sys.argv = ["ranks_step.py", str(model_dir), str(out), json.dumps(options)]
    ranks_step.main()


def fail(how: str) -> None:
    """Rank 1 fails (``raise``: an error; ``exit``: its process dies) before joining; rank 0 waits for it in the
    process group's start, as long as ``ranks_timeout_s`` (a day): only a launcher that stops it ends it."""
    env = TorchrunEnvironment()
    if env.rank == 1 and how == "raise":
        raise ValueError("rank 1 cannot go on")
    if env.rank == 1:
        os._exit(3)
    ranks.start(env, LearnerSettings())


def wait() -> None:
    """Wait until the process is stopped."""
    threading.Event().wait()


if __name__ == "__main__":
    run_ranks(RaySettings(ranks=2, address=sys.argv[1]), wait, lambda line: print(line, flush=True))
