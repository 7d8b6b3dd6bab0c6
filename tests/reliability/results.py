"""The suite's result rows: one JSON line per fault test run, read back by ``summary``.

Rows go to ``tests/reliability/results.jsonl`` (``RELIABILITY_RESULTS`` names another file). The
``session`` field groups the rows of one pytest run, so the summary can show the latest figures.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).with_name("results.jsonl")
SESSION = f"{time.strftime('%Y-%m-%dT%H:%M:%S')}-{os.getpid()}"


def results_path() -> Path:
    """Where result rows are appended."""
    return Path(os.environ.get("RELIABILITY_RESULTS", DEFAULT))


def repeat(default: int) -> int:
    """How many times a randomized fault is repeated (``RELIABILITY_REPEAT`` multiplies it: the long variant)."""
    return default * max(1, int(os.environ.get("RELIABILITY_REPEAT", "1")))


def record(
    fault: str, runs: int, operations: int, lost: int, duplicated: int, recovered_s: float | None, **extra: Any
) -> dict[str, Any]:
    """Append one result row and return it."""
    row = {
        "session": SESSION,
        "fault": fault,
        "runs": runs,
        "operations": operations,
        "lost": lost,
        "duplicated": duplicated,
        "recovered_s": None if recovered_s is None else round(recovered_s, 3),
        **extra,
    }
    path = results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    return row


def rows(path: Path | None = None) -> list[dict[str, Any]]:
    """Every result row of the file."""
    path = path or results_path()
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
