"""``voltbus export-training``: a selection of ``triplets`` or ``trajectories`` as Parquet (every column), or
as OpenAI fine-tuning JSONL (``{"messages": [...]}`` from the recorded request and response; a
prompt/completion pair for completions calls). Rows without token ids or usable text are counted
and reported, never dropped silently; the selection is read in pages so no row limit cuts it short."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from voltbus.projections.blocks import SQL_DIR, parse
from voltbus.schemas.errors import InvalidCommand
from voltbus.services.progress import Meter
from voltbus.services.projector.client import run_sql
from voltbus.services.settings import Settings

TABLES = {"triplets": "rollout_id, attempt_id, call_index", "trajectories": "rollout_id, attempt_id, row_index"}
LAST_CALL = {"triplets": "call_id", "trajectories": "call_ids[len(call_ids)]"}
NO_IDS = {"triplets": "no_token_ids", "trajectories": "len(response_ids) = 0"}
TEXTS_SQL = next(b.sql for b in parse((SQL_DIR / "queries" / "training.sql").read_text(), "training.sql"))
ASSISTANT_KEYS = ("role", "content", "tool_calls", "function_call")


def selection(
    table: str, where: str | None, run: str | None, mode: str | None, versions: str | None
) -> tuple[str, dict[str, object]]:
    """The WHERE clause and parameters of a selection.

    >>> clause, params = selection("triplets", "reward > 0", None, "train", "2..5")
    >>> clause.split(" AND ")[:2], params
    (['(reward > 0)', 'mode = $mode'], {'mode': 'train', 'lo': 2, 'hi': 5})
    """
    if table not in TABLES:
        raise InvalidCommand(f"--table must be one of {', '.join(TABLES)}, got {table!r}")
    parts, params = [f"({where})"] if where else [], {}
    if mode:
        parts.append("mode = $mode")
        params["mode"] = mode
    if run:  # the rollouts the run's steps sampled: the selection of `train --offline --from-run` (offline_rows.sql)
        parts.append("rollout_id IN (SELECT unnest(rollout_ids) FROM step_batches WHERE run_id = $run)")
        params["run"] = run
    if versions:
        match = re.fullmatch(r"(\d+)(?:\.\.(\d+))?", versions.strip())
        if not match:
            raise InvalidCommand(f"--versions takes N or LOW..HIGH, got {versions!r}")
        params |= {"lo": int(match[1]), "hi": int(match[2] or match[1])}
        in_range = "FROM resources WHERE version BETWEEN $lo AND $hi"
        parts.append(  # a trajectory is in the range when every version that generated it is
            f"resources_id IN (SELECT resources_id {in_range})"
            if table == "triplets"
            else f"list_has_all((SELECT list(resources_id) {in_range}), resources_ids)"
        )
    return " AND ".join(parts) or "TRUE", params


def example(request: str | None, response: str | None) -> dict[str, Any] | None:
    """One fine-tuning line from a recorded call, or None when it has no usable text.

    >>> example('{"messages": [{"role": "user", "content": "2+2?"}]}',
    ...         '{"choices": [{"message": {"role": "assistant", "content": "4", "refusal": null}}]}')
    {'messages': [{'role': 'user', 'content': '2+2?'}, {'role': 'assistant', 'content': '4'}]}
    >>> example('{"prompt": "2+2="}', '{"choices": [{"text": "4"}]}')
    {'prompt': '2+2=', 'completion': '4'}
    >>> example('{"prompt": [1, 2]}', '{"choices": [{"text": "4"}]}') is None  # token ids, no text
    True
    >>> reply = '{{"choices": [{{"message": {{"role": "assistant", "content": {}}}}}]}}'
    >>> [example('{"messages": []}', reply.format(c)) for c in ('""', '" "', "null")]
    [None, None, None]
    >>> example('{"prompt": "2+2="}', '{"choices": [{"text": ""}]}') is None  # an empty reply teaches nothing
    True
    """
    try:
        body, answer = json.loads(request or "null"), json.loads(response or "null")
        choice = answer["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(body, dict) or not isinstance(choice, dict):
        return None
    if isinstance(body.get("messages"), list) and isinstance(choice.get("message"), dict):
        reply = {k: v for k, v in choice["message"].items() if k in ASSISTANT_KEYS and v is not None}
        content = reply.get("content")
        if not (isinstance(content, str) and content.strip()) and not reply.get("tool_calls"):
            return None  # no text and no tool call: an empty assistant reply is no example
        line: dict[str, Any] = {"messages": [*body["messages"], {"role": "assistant", **reply}]}
        return line | ({"tools": body["tools"]} if body.get("tools") else {})
    if isinstance(body.get("prompt"), str) and isinstance(choice.get("text"), str) and choice["text"].strip():
        return {"prompt": body["prompt"], "completion": choice["text"]}
    return None


def export_training(
    settings: Settings,
    to: Path,
    fmt: str,
    table: str,
    clause: str,
    params: dict[str, object],
    db: Path | None,
    say: Callable[[str], None],
) -> dict[str, int]:
    """Write the selection to ``to``; return the counts (rows, written, without token ids, without text)."""
    if fmt not in ("parquet", "jsonl"):
        raise InvalidCommand(f"--format must be parquet or jsonl, got {fmt!r}")
    source = f"SELECT * FROM {table} WHERE {clause}"
    total, no_ids = (
        run_sql(settings, f"SELECT count(*), count(*) FILTER (WHERE {NO_IDS[table]}) FROM ({source})", db, params)
        .to_pylist()[0]
        .values()
    )
    page = settings.projector.max_rows
    counts = {"rows": total, "written": 0, "no_token_ids": no_ids, "no_text": 0}
    meter = Meter("export-training", total, say, unit="rows")
    to.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        writer = None
        for offset in range(0, total, page):
            chunk = run_sql(settings, f"{source} ORDER BY {TABLES[table]} LIMIT {page} OFFSET {offset}", db, params)
            writer = writer or pq.ParquetWriter(to, chunk.schema)
            writer.write_table(chunk)
            counts["written"] += chunk.num_rows
            meter.add(chunk.num_rows)
        if writer is None:  # an empty selection still gets a file with the table's columns
            pq.write_table(run_sql(settings, f"{source} LIMIT 0", db, params), to)
        else:
            writer.close()
    else:
        key = f"row_number() OVER (ORDER BY {TABLES[table]}) AS key"
        keyed = f"SELECT {key}, rollout_id, attempt_id, {LAST_CALL[table]} AS call_id FROM ({source})"
        with to.open("w") as out:
            for offset in range(0, total, page):
                rows = run_sql(
                    settings, TEXTS_SQL.format(selected=keyed), db, params | {"limit": page, "offset": offset}
                )
                meter.add(rows.num_rows)
                for row in rows.to_pylist():
                    line = example(row["request"], row["response"])
                    if line is None:
                        counts["no_text"] += 1
                        continue
                    out.write(json.dumps(line, ensure_ascii=False) + "\n")
                    counts["written"] += 1
    say(
        f"export-training: {counts['written']:,} of {total:,} {table} rows -> {to} ({fmt}) "
        f"in {meter.elapsed():.1f}s; "
        f"{no_ids:,} without token ids"
        + (" (flagged in the rows)" if fmt == "parquet" else "")
        + (f", {counts['no_text']:,} without usable request/response text (not written)" if fmt == "jsonl" else "")
    )
    return counts
