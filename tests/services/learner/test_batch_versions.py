"""Rows with a call of unknown version (vLLM's weights nobody labelled, a push cut short) count as
staler than any version of the run: read by the learner's own SQL from the projection's tables."""

from __future__ import annotations

from pathlib import Path

from voltbus.services.learner.grpo.batch import prepare
from voltbus.services.learner.grpo.rows import ROWS_SQL
from voltbus.services.projector.projector import Projector

INSERT = """INSERT INTO trajectories (rollout_id, attempt_id, row_index, task_id, prompt_ids, response_ids,
    response_mask, logprobs, reward, call_resources, resources_ids, settings_id, adapter_version) VALUES ($r,
    $r || '-1', 0, 't', [1], [2], [1], [-0.5], 1.0, $calls, list_filter($calls, lambda x: x IS NOT NULL), 's', 1)"""
ROLLOUT = """INSERT INTO rollouts (rollout_id, latest_attempt_id, status, start_time, attempt_count, last_seq)
    VALUES ($r, $r || '-1', 'succeeded', 0, 1, 0)"""


def test_rows_with_an_unknown_version_are_staler_than_any_version(tmp_path: Path) -> None:
    projector = Projector(tmp_path / "p.duckdb")
    calls = {"known": ["run:3", "run:3"], "half": ["run:3", None], "unknown": [None], "stale": ["run:1"]}
    try:
        for rid, resources in calls.items():
            projector.con.execute(ROLLOUT, {"r": rid})
            projector.con.execute(INSERT, {"r": rid, "calls": resources})
        found = projector.con.execute(ROWS_SQL, {"rollouts": list(calls)})
        names = [d[0] for d in found.description]
        rows = [dict(zip(names, row, strict=True)) for row in found.fetchall()]
    finally:
        projector.close()
    assert {r["rollout_id"]: r["call_resources"] for r in rows} == calls

    online = prepare(rows, list(calls), version=3, max_staleness=1)
    assert [r.rollout_id for r in online.rows] == ["known"]
    assert online.counts["rows_dropped_stale"] == 3 and online.counts["rows_unknown_version"] == 2
    assert online.counts["staleness_max"] == 0

    patient = prepare(rows, list(calls), version=3, max_staleness=4)  # a cut past every version keeps them
    assert sorted(r.rollout_id for r in patient.rows) == sorted(calls)
    assert patient.counts["staleness_max"] == 4 and patient.counts["rows_unknown_version"] == 2
