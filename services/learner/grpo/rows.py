"""A step's training rows: all of its rollouts' rows, waited for while the projector still computes some (their
model calls are projected, their trajectories not yet), and the rollouts left out counted with their cause."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..session import Session

ROWS_SQL = (Path(__file__).parent / "batch_rows.sql").read_text()
MISSING_SQL = (Path(__file__).parent / "rows_missing.sql").read_text()
POLL_S = 0.25
"""Pause between two reads of rows still being computed (waiting on another process, with a deadline)."""
NO_CALL_GRACE_S = 3.0
"""How long rollouts with no model call at all are waited for (at most ``rows_wait_s``): a streamed call is
recorded by the gateway once its stream ended, which may be after the agent, and so the attempt, ended."""


async def batch_rows(
    session: Session,
    step: int,
    rollout_ids: Sequence[str],
    wait_s: float,
    say: Callable[[str], None],
    grace_s: float = NO_CALL_GRACE_S,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The batch's training rows, and counts of the rollouts that have none (``rollouts_rows_late``: waited for;
    ``rollouts_without_calls``, ``rollouts_without_token_ids``, ``rollouts_rows_not_ready``: left out). Rollouts
    whose calls carry token ids are waited for up to ``wait_s``, those with no call yet up to ``grace_s``."""
    start, waited = time.monotonic(), set[str]()
    while True:
        records = (await session.query(ROWS_SQL, {"rollouts": list(rollout_ids)})).to_pylist()
        missing = sorted(set(rollout_ids) - {r["rollout_id"] for r in records})
        causes = (await session.query(MISSING_SQL, {"rollouts": missing})).to_pylist() if missing else []
        pending = [c["rollout_id"] for c in causes if c["calls_with_tokens"]]
        waited.update(missing)
        spent = time.monotonic() - start
        if not (pending and spent < wait_s) and not (missing and spent < min(wait_s, grace_s)):
            break
        await asyncio.sleep(POLL_S)  # the projector computes their rows, or their calls are still on the way
    counts = {
        "rollouts_rows_late": float(len(waited - set(missing))),
        "rollouts_without_calls": float(sum(not c["calls"] for c in causes)),
        "rollouts_without_token_ids": float(sum(bool(c["calls"]) and not c["calls_with_tokens"] for c in causes)),
        "rollouts_rows_not_ready": float(len(pending)),
    }
    if missing:
        say(left_out(step, len(missing), len(rollout_ids), counts, wait_s))
    return records, counts


def left_out(step: int, missing: int, total: int, counts: dict[str, float], wait_s: float) -> str:
    """The warning naming why rollouts of a step have no training rows.

    >>> c = {"rollouts_without_calls": 30.0, "rollouts_without_token_ids": 6.0, "rollouts_rows_not_ready": 0.0}
    >>> print(left_out(4, 36, 128, c, 30.0))  # doctest: +ELLIPSIS
    warning: step 4 trains without 36 of its 128 rollouts: 30 recorded no model call (...); 6 ... token ids (...)
    """
    parts = []
    if n := int(counts["rollouts_without_calls"]):
        parts.append(f"{n} recorded no model call (the agent did not call the rollout's endpoint, or failed first)")
    if n := int(counts["rollouts_without_token_ids"]):
        parts.append(
            f"{n} have model calls without token ids (the agent used the gateway's unscoped endpoint, "
            "or the engine returned none)"
        )
    if n := int(counts["rollouts_rows_not_ready"]):
        parts.append(f"{n} still had no training rows from the projector after {wait_s:.0f}s (learner.rows_wait_s)")
    return f"warning: step {step} trains without {missing} of its {total} rollouts: " + "; ".join(parts)
