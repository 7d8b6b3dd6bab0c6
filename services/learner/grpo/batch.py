"""From a finished batch's SQL rows to what GRPO trains on: rows, one reward and one group per rollout,
and the counts of everything left out (stale, without logprobs, without a reward).

A row's staleness is ``version`` minus the oldest version that sampled one of its calls. A call
recorded with no version (unknown: vLLM's weights nobody labelled, a push cut short) may have been
sampled by anything, so its row counts as staler than any version of the run (``version + 1``):
dropped as stale whenever that passes ``max_staleness``, and counted in ``rows_unknown_version``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .objective import Row


def row_lag(rec: dict[str, Any], version: int) -> tuple[int, bool]:
    """A row's staleness against ``version``, and whether a call's version is unknown.

    >>> row_lag({"call_resources": ["run:2", "run:3"]}, 4), row_lag({"call_resources": ["run:3", None]}, 4)
    ((2, False), (5, True))
    >>> row_lag({"resources_ids": ["run:3"]}, 3), row_lag({"resources_ids": []}, 3)
    ((0, False), (4, True))
    """
    called = rec.get("call_resources")
    named = list(called) if called else list(rec.get("resources_ids") or [])
    if not named or None in named:
        return version + 1, True
    versions = [v for v in (version_number(r) for r in named) if v is not None]
    return (version - min(versions) if versions else 0), False


def version_number(resources_id: str | None) -> int | None:
    """The version of a pinned resources id (``run-1:3`` → 3); None when it names none.

    >>> version_number("run-1:3"), version_number("local:abc"), version_number(None)
    (3, None, None)
    """
    if not resources_id or ":" not in resources_id:
        return None
    tail = resources_id.rsplit(":", 1)[1]
    return int(tail) if tail.isdigit() else None


@dataclass
class Prepared:
    """A batch ready to train on, and what was counted on the way."""

    rows: list[Row] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    counts: dict[str, float] = field(default_factory=dict)


def prepare(
    records: Sequence[dict[str, Any]], rollout_ids: Sequence[str], version: int, max_staleness: int
) -> Prepared:
    """Keep rows sampled at most ``max_staleness`` versions before ``version`` (``row_lag``) and with
    logprobs; a rollout's reward is its first row's (the return at its first call), 0.0 when missing
    (counted).

    >>> recs = [dict(rollout_id="a", task_id="t", prompt_ids=[1], response_ids=[2], response_mask=[1],
    ...              logprobs=[-0.5], reward=1.0, resources_ids=["run:3"], row_index=0)]
    >>> p = prepare(recs, ["a", "b"], version=3, max_staleness=1)
    >>> p.rewards, p.counts["rollouts_without_rows"], p.counts["staleness_max"]
    ({'a': 1.0}, 1.0, 0.0)
    >>> prepare(recs, ["a"], version=5, max_staleness=1).counts["rows_dropped_stale"]
    1.0
    >>> unknown = [{**recs[0], "call_resources": [None], "resources_ids": []}]
    >>> [prepare(unknown, ["a"], version=3, max_staleness=s).counts["rows"] for s in (1, 4)]
    [0.0, 1.0]
    """
    out = Prepared()
    keys = ("rows_dropped_stale", "rows_unknown_version", "rows_without_logprobs", "reward_missing", "rows")
    counts = dict.fromkeys(keys, 0.0)
    staleness: list[int] = []
    for rec in records:
        rid = rec["rollout_id"]
        lag, unknown = row_lag(rec, version)
        counts["rows_unknown_version"] += unknown
        if lag > max_staleness:
            counts["rows_dropped_stale"] += 1
            continue
        if rec.get("logprobs") is None:
            counts["rows_without_logprobs"] += 1
            continue
        staleness.append(lag)
        if rid not in out.rewards:
            reward = rec.get("reward")
            counts["reward_missing"] += reward is None
            out.rewards[rid] = float(reward) if reward is not None else 0.0
            out.groups[rid] = str(rec.get("task_id") or rid)
        row = Row(rid, rec["prompt_ids"], rec["response_ids"], rec["response_mask"], rec["logprobs"])
        out.rows.append(row)
    counts["rows"] = float(len(out.rows))
    counts["rollouts_trained"] = float(len(out.rewards))
    counts["rollouts_without_rows"] = float(len(set(rollout_ids) - {r["rollout_id"] for r in records}))
    counts["staleness_max"] = float(max(staleness, default=0))
    counts["staleness_mean"] = sum(staleness) / len(staleness) if staleness else 0.0
    out.counts = counts
    return out
