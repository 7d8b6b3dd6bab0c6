"""The op log of a fault test (Jepsen's history): every operation a client tried, with its outcome.

One JSON object per line: ``process`` (who), ``op`` (what), ``args``, ``outcome`` (``ok``: the bus
acknowledged; ``fail``: it certainly did not happen; ``unknown``: a timeout or a lost connection, it
may or may not have happened), ``t_start``/``t_end`` (monotonic seconds) and ``result``. Append-only,
flushed per line, so a history survives the crash of the process that wrote it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats.errors

from voltbus.schemas.errors import ConcurrencyConflict, InvalidCommand, PermissionDenied, PublishFailed

OUTCOMES = ("ok", "fail", "unknown")

FAILED = (InvalidCommand, ConcurrencyConflict, PermissionDenied)
"""Errors that prove an operation did not happen (refused by the decider, by the server's OCC, or by the
bus's permissions): the checker ``failed_but_stored`` holds the system to it."""
AMBIGUOUS = (TimeoutError, PublishFailed, nats.errors.Error, OSError)
"""Errors after which the operation may or may not have been stored."""


@dataclass
class Op:
    """One operation being recorded; ``result`` may be set inside the ``with`` block."""

    process: str
    op: str
    args: dict[str, Any]
    t_start: float = field(default_factory=time.monotonic)
    outcome: str = "unknown"
    result: Any = None


class OpLog:
    """An append-only JSONL history."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, op: Op) -> None:
        """Append one finished operation."""
        row = {
            "process": op.process,
            "op": op.op,
            "args": op.args,
            "outcome": op.outcome,
            "t_start": op.t_start,
            "t_end": time.monotonic(),
            "result": op.result,
        }
        self._file.write(json.dumps(row, default=str) + "\n")
        self._file.flush()

    @contextlib.contextmanager
    def record(self, process: str, op: str, **args: Any) -> Iterator[Op]:
        """Run the block as one operation: ok if it returns, fail or unknown by the error it raises.

        Known errors are recorded and swallowed (a client goes on after a failure); anything else
        is recorded as unknown and raised.
        """
        entry = Op(process, op, args)
        try:
            yield entry
            entry.outcome = "ok"
        except FAILED as exc:
            entry.outcome, entry.result = "fail", f"{type(exc).__name__}: {exc}"
        except AMBIGUOUS as exc:
            entry.outcome, entry.result = "unknown", f"{type(exc).__name__}: {exc}"
        finally:
            self.write(entry)

    def close(self) -> None:
        self._file.close()


def read(path: Path) -> list[dict[str, Any]]:
    """Every operation of a history file, in the order written."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count(ops: list[dict[str, Any]], outcome: str | None = None, op: str | None = None) -> int:
    """How many operations have this outcome and name (None: any)."""
    return sum(1 for o in ops if (outcome is None or o["outcome"] == outcome) and (op is None or o["op"] == op))
