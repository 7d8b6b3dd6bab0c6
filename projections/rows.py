"""Pure mapping from stored events to table rows (dicts keyed by column name), one SQL block each.

Rollout and attempt rows come from the lifecycle decider's folded state, never from a second
copy of the lifecycle rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pyarrow as pa

from voltbus.schemas.gateway import GatewayPaused, GatewayResumed
from voltbus.schemas.resources import ResourcesPublished
from voltbus.schemas.spans import ModelCalled, RewardReported, SpanItem, SpanRecorded, items_of
from voltbus.schemas.training import CheckpointSaved, RunFinished, RunStarted, StepCompleted, StepStarted
from voltbus.schemas.workers import WorkerStatusReported
from voltbus.services.eventlog import Envelope
from voltbus.services.lifecycle import RolloutState

from .lean import LeanModelCalled

Row = dict[str, Any]

_encode = msgspec.json.Encoder().encode


_TEXT, _F64, _I64, _I32 = pa.string(), pa.float64(), pa.int64(), pa.int32()
ARROW: dict[str, pa.Schema] = {
    "SpanRecorded": pa.schema(
        [("seq", _I64)]
        + [(c, _TEXT) for c in ("event_id", "rollout_id", "attempt_id")]
        + [("sequence_id", _I32)]
        + [(c, _TEXT) for c in ("trace_id", "span_id", "parent_id", "name")]
        + [("start_time", _F64), ("end_time", _F64)]
        + [(c, _TEXT) for c in ("status_code", "status_description", "attributes", "events", "resource_attributes")]
        + [("seq_index", _I32)]
    ),
    "ModelCalled": pa.schema(
        [("seq", _I64)]
        + [(c, _TEXT) for c in ("event_id", "rollout_id", "attempt_id", "call_id", "resources_id", "model")]
        + [(c, _TEXT) for c in ("request", "response", "prompt_ids", "response_ids", "logprobs")]
        + [("latency_s", _F64), ("prompt_tokens", _I32), ("completion_tokens", _I32), ("total_tokens", _I32)]
        + [("status", _TEXT), ("error", _TEXT), ("recorded_at", _F64), ("finish_reason", _TEXT)]
        + [("http_status", _I32), ("upstream", _TEXT), ("retries", _I32), ("rewritten", pa.list_(_TEXT))]
        + [("streamed", pa.bool_()), ("mode", _TEXT), ("choices", _TEXT), ("seq_index", _I32)]
    ),
    "RewardReported": pa.schema(
        [("seq", _I64)]
        + [(c, _TEXT) for c in ("event_id", "rollout_id", "attempt_id")]
        + [("value", _F64), ("dimensions", _TEXT), ("primary_key", _TEXT), ("call_id", _TEXT), ("recorded_at", _F64)]
        + [("seq_index", _I32)]
    ),
    "activity_rows": pa.schema(
        [("rollout_id", _TEXT), ("attempt_id", _TEXT), ("last_seen", _F64), ("events", _I64), ("first_seq", _I64)]
        + [("last_seq", _I64)]
    ),
    "rollout_rows": pa.schema(
        [(c, _TEXT) for c in ("rollout_id", "status", "mode", "resources_id", "input", "config", "metadata")]
        + [("start_time", _F64), ("end_time", _F64), ("attempt_count", _I32), ("latest_attempt_id", _TEXT)]
        + [("reason", _TEXT), ("last_seq", _I64)]
    ),
    "attempt_rows": pa.schema(
        [("rollout_id", _TEXT), ("attempt_id", _TEXT), ("sequence_id", _I32), ("status", _TEXT), ("worker_id", _TEXT)]
        + [("start_time", _F64), ("end_time", _F64), ("last_heartbeat_time", _F64)]
        + [(c, _TEXT) for c in ("error_type", "error_message", "metadata")]
        + [("last_seq", _I64)]
    ),
    "state_rows": pa.schema([("rollout_id", _TEXT), ("state", pa.binary())]),
}
"""Arrow types of the busiest blocks' rows (the table's column types; number lists as JSON text), so that
no batch pays for type inference. Other blocks' types are inferred."""


def json_text(value: object) -> str:
    """A value as JSON text for a JSON column.

    >>> json_text({"a": [1, 2]})
    '{"a":[1,2]}'
    """
    return _encode(value).decode()


def list_text(value: msgspec.Raw | list[Any]) -> str:
    """A number list as JSON text for the ModelCalled block (a lean event's text as stored).

    >>> list_text([1, 2]), list_text(msgspec.Raw(b"[3]"))
    ('[1,2]', '[3]')
    """
    return bytes(value).decode() if isinstance(value, msgspec.Raw) else json_text(value)


def telemetry_rows(env: Envelope) -> list[tuple[str, Row]]:
    """The rows a spans-stream message adds (one per event of a batch that is not only a sign of life), each
    under its block name; the events of one message share its sequence."""
    items = enumerate(items_of(env.event))  # type: ignore[arg-type]
    return [row for i, e in items if (row := telemetry_row(e, env.seq, i)) is not None]


def telemetry_row(e: SpanItem, seq: int, index: int) -> tuple[str, Row] | None:
    """The row a telemetry event stored at ``seq`` (the ``index``-th of its message) adds, under its block name
    (None: it only counts as activity)."""
    match e:
        case SpanRecorded():
            return "SpanRecorded", {
                "seq": seq,
                "event_id": e.event_id,
                "rollout_id": e.rollout_id,
                "attempt_id": e.attempt_id,
                "sequence_id": e.sequence_id,
                "trace_id": e.trace_id,
                "span_id": e.span_id,
                "parent_id": e.parent_id,
                "name": e.name,
                "start_time": e.start_time,
                "end_time": e.end_time,
                "status_code": e.status.status_code,
                "status_description": e.status.description,
                "attributes": json_text(e.attributes),
                "events": json_text(e.events),
                "resource_attributes": json_text(e.resource_attributes),
                "seq_index": index,
            }
        case ModelCalled() | LeanModelCalled():
            return "ModelCalled", {
                "seq": seq,
                "event_id": e.event_id,
                "rollout_id": e.rollout_id,
                "attempt_id": e.attempt_id,
                "call_id": e.call_id,
                "resources_id": e.resources_id,
                "model": e.model,
                "request": bytes(e.request).decode(),
                "response": bytes(e.response).decode(),
                "prompt_ids": list_text(e.prompt_ids),
                "response_ids": list_text(e.response_ids),
                "logprobs": list_text(e.logprobs),
                "latency_s": e.latency_s,
                "prompt_tokens": e.usage.prompt_tokens,
                "completion_tokens": e.usage.completion_tokens,
                "total_tokens": e.usage.total_tokens,
                "status": e.status,
                "error": json_text(e.error) if e.error is not None else None,
                "recorded_at": e.at,
                "finish_reason": e.finish_reason,
                "http_status": e.http_status,
                "upstream": e.upstream,
                "retries": e.retries,
                "rewritten": e.rewritten,
                "streamed": e.streamed,
                "mode": e.mode,
                "choices": json_text(e.choices),
                "seq_index": index,
            }
        case RewardReported():
            return "RewardReported", {
                "seq": seq,
                "event_id": e.event_id,
                "rollout_id": e.rollout_id,
                "attempt_id": e.attempt_id,
                "value": e.value,
                "dimensions": json_text(e.dimensions),
                "primary_key": e.primary_key,
                "call_id": e.call_id,
                "recorded_at": e.at,
                "seq_index": index,
            }
    return None


def gateway_row(e: GatewayPaused | GatewayResumed, seq: int) -> Row:
    """A gateway's pause or resume as one history row."""
    paused = isinstance(e, GatewayPaused)
    return {
        "seq": seq,
        "gateway_id": e.gateway_id,
        "action": "paused" if paused else "resumed",
        "reason": e.reason if paused else None,
        "retry_after_s": e.retry_after_s if paused else None,
        "inflight": e.inflight if paused else None,
        "paused_s": None if paused else e.paused_s,
        "versions": None if paused or not e.versions else msgspec.json.encode(e.versions).decode(),
        "recorded_at": e.at,
    }


def activity_keys(env: Envelope) -> list[tuple[str, str]]:
    """(rollout, attempt) of each event a spans-stream message holds: every one is a sign of life."""
    return [(e.rollout_id, e.attempt_id) for e in items_of(env.event)]  # type: ignore[arg-type]


def count_activity(activity: dict[tuple[str, str], Row], key: tuple[str, str], env: Envelope) -> None:
    """Add a sign of life of attempt ``key`` (an event of the message ``env``) to its ``attempt_activity`` row in
    ``activity``."""
    seen = activity.get(key)
    activity[key] = {
        "rollout_id": key[0],
        "attempt_id": key[1],
        "last_seen": max(seen["last_seen"], env.time) if seen else env.time,
        "events": seen["events"] + 1 if seen else 1,
        "first_seq": seen["first_seq"] if seen else env.seq,
        "last_seq": env.seq,
    }


def control_row(env: Envelope) -> tuple[str, Row] | None:
    """The row a non-rollout control event adds or replaces, under its block name."""
    e, seq = env.event, env.seq
    match e:
        case ResourcesPublished():
            resources = json_text({k: msgspec.to_builtins(v) for k, v in e.resources.items()})
            return "ResourcesPublished", {
                "seq": seq,
                "resources_id": e.resources_id,
                "name": e.name,
                "version": e.version,
                "resources": resources,
                "created_at": e.created_at,
            }
        case GatewayPaused() | GatewayResumed():
            return type(e).__name__, gateway_row(e, seq)
        case WorkerStatusReported():
            stats = json_text(e.heartbeat_stats) if e.heartbeat_stats else None
            return "WorkerStatusReported", {
                "worker_id": e.worker_id,
                "status": e.status,
                "current_rollout_id": e.current_rollout_id,
                "current_attempt_id": e.current_attempt_id,
                "heartbeat_stats": stats,
                "last_heartbeat_time": e.last_heartbeat_time,
                "last_dequeue_time": e.last_dequeue_time,
                "last_busy_time": e.last_busy_time,
                "last_idle_time": e.last_idle_time,
                "updated_at": e.at,
                "seq": seq,
            }
        case RunStarted():
            return "RunStarted", {
                "run_id": e.run_id,
                "algorithm": e.algorithm,
                "config": bytes(e.config).decode(),
                "status": "running",
                "reason": None,
                "started_at": e.at,
                "finished_at": None,
                "seq": seq,
            }
        case StepStarted():
            return "StepStarted", {
                "seq": seq,
                "run_id": e.run_id,
                "step": e.step,
                "resources_id": e.resources_id,
                "rollout_ids": e.rollout_ids,
                "recorded_at": e.at,
            }
        case StepCompleted():
            return "StepCompleted", {
                "seq": seq,
                "run_id": e.run_id,
                "step": e.step,
                "metrics": json_text(e.metrics),
                "resources_id": e.resources_id,
                "recorded_at": e.at,
            }
        case CheckpointSaved():
            return "CheckpointSaved", {
                "seq": seq,
                "run_id": e.run_id,
                "step": e.step,
                "uri": e.uri,
                "sha256": e.sha256,
                "recorded_at": e.at,
            }
        case RunFinished():
            return "RunFinished", {
                "run_id": e.run_id,
                "status": e.status,
                "reason": e.reason,
                "finished_at": e.at,
                "seq": seq,
            }
    return None


def fold_tables(folded: Sequence[tuple[RolloutState, int]]) -> list[tuple[str, pa.Table]]:
    """The rows of the rollouts a batch changed, their attempts' and their kept folds, from their folded states
    (each with the sequence of the last event that changed it), as Arrow tables built column by column: no
    row dicts, cheaper than ``from_pylist`` of them (BENCHMARKS.md, "Projections"). JSON columns get msgspec's text
    as bytes (UTF-8)."""
    if not folded:
        return []
    states = [s for s, _ in folded]
    seqs = [q for _, q in folded]
    rollouts = {
        "rollout_id": [s.rollout_id for s in states],
        "status": [s.status for s in states],
        "mode": [s.mode for s in states],
        "resources_id": [s.resources_id for s in states],
        "input": [bytes(s.input) for s in states],
        "config": [_encode(s.config) for s in states],
        "metadata": [_encode(s.metadata) for s in states],
        "start_time": [s.start_time for s in states],
        "end_time": [s.end_time for s in states],
        "attempt_count": [len(s.attempts) for s in states],
        "latest_attempt_id": [s.attempts[-1].attempt_id if s.attempts else None for s in states],
        "reason": [s.reason or None for s in states],
        "last_seq": seqs,
    }
    owned = [(s.rollout_id, a, q) for s, q in folded for a in s.attempts]
    attempts = {
        "rollout_id": [r for r, _, _ in owned],
        "attempt_id": [a.attempt_id for _, a, _ in owned],
        "sequence_id": [a.sequence_id for _, a, _ in owned],
        "status": [a.status for _, a, _ in owned],
        "worker_id": [a.worker_id for _, a, _ in owned],
        "start_time": [a.start_time for _, a, _ in owned],
        "end_time": [a.end_time for _, a, _ in owned],
        "last_heartbeat_time": [a.last_heartbeat_time for _, a, _ in owned],
        "error_type": [a.error.type if a.error else None for _, a, _ in owned],
        "error_message": [a.error.message if a.error else None for _, a, _ in owned],
        "metadata": [_encode(a.metadata) for _, a, _ in owned],
        "last_seq": [q for _, _, q in owned],
    }
    kept = {"rollout_id": rollouts["rollout_id"], "state": [_encode(s) for s in states]}
    out = [("rollout_rows", rollouts), ("attempt_rows", attempts), ("state_rows", kept)]
    return [(name, _columns(ARROW[name], columns)) for name, columns in out if columns["rollout_id"]]


def _columns(schema: pa.Schema, columns: dict[str, list[Any]]) -> pa.Table:
    return pa.Table.from_arrays([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)
