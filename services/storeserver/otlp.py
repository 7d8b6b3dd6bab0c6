"""OTLP/HTTP trace ingest (``POST /v1/traces``): protobuf or JSON, optionally gzipped, as Agent Lightning's store
reads it (``utils/otlp.py``). A span belongs to the rollout and attempt named by its attributes
``agentlightning.rollout_id`` / ``agentlightning.attempt_id`` (else its resource's), with the sequence id of
``agentlightning.span_sequence_id`` when given (else the rollout's next). Spans that name no attempt, an unknown
one, or carry malformed ids are rejected and counted in the answer's ``partial_success``, never dropped unsaid."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.spans import SpanEventInfo, SpanStatus
from voltbus.services.clients.store import Span, Store
from voltbus.services.clients.telemetry.semconv import LightningResourceAttributes as Ids

from .errors import HttpError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")
_KEYS = (Ids.ROLLOUT_ID.value, Ids.ATTEMPT_ID.value, Ids.SPAN_SEQUENCE_ID.value)
KNOWN_KEPT = 4096
"""Attempts an ingest remembers as existing (so a stream of exports reads each attempt once)."""


def parse(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """The export request in ``body`` (protobuf, or OTLP's JSON with hex ids); 400 when it does not parse."""
    message = ExportTraceServiceRequest()
    try:
        if content_type == PROTOBUF:
            message.ParseFromString(body)
        else:
            json_format.ParseDict(_ids_as_base64(json.loads(body or b"{}")), message)
    except (ProtoDecodeError, json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise HttpError(400, "invalid_otlp", f"the OTLP trace export does not parse: {str(exc)[:300]}") from None
    return message


def _ids_as_base64(value: Any) -> Any:
    """OTLP JSON carries trace and span ids as hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(value, list):
        return [_ids_as_base64(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _ids_as_base64(v) for k, v in value.items()}
    for key in _ID_FIELDS:
        if isinstance(out.get(key), str):
            try:
                out[key] = base64.b64encode(bytes.fromhex(out[key])).decode()
            except ValueError:
                raise HttpError(400, "invalid_otlp", f"{key} {out[key][:40]!r} is not hex") from None
    return out


def answer(response: ExportTraceServiceResponse, content_type: str) -> bytes:
    """The export response in the request's encoding."""
    if content_type == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response).encode()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind) if kind else None


def _attributes(pairs: Sequence[KeyValue]) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def _seconds(nanos: int) -> float | None:
    return nanos / 1e9 if nanos else None


class Entry(NamedTuple):
    """One span of an export with its attributes, its resource's, and the sequence id it gives (or None)."""

    span: ProtoSpan
    attributes: dict[str, Any]
    resource: dict[str, Any]
    sequence_id: int | None


@dataclass
class Batch:
    """The spans of one export, grouped by attempt, and what was rejected."""

    spans: dict[tuple[str, str], list[Entry]] = field(default_factory=dict)
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def reject(self, count: int, reason: str) -> None:
        """Count ``count`` spans rejected, with the first few reasons kept for the answer."""
        self.rejected += count
        if len(self.reasons) < 3:
            self.reasons.append(reason)


def _sequence(raw: Any) -> int | None:
    try:
        seq = int(str(raw))
    except ValueError:
        return None
    return seq if seq > 0 else None


def group(request: ExportTraceServiceRequest) -> Batch:
    """Each span with its attempt (span attributes win over the resource's), its attributes and sequence id."""
    batch = Batch()
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                attrs = _attributes(span.attributes)
                rid, aid, seq = (attrs.get(k, resource.get(k)) for k in _KEYS)
                if not rid or not aid:
                    batch.reject(
                        1, f"span {span.name[:60]!r} names no {Ids.ROLLOUT_ID.value} and {Ids.ATTEMPT_ID.value}"
                    )
                elif len(span.trace_id) != 16 or len(span.span_id) != 8:
                    batch.reject(1, f"span {span.name[:60]!r} has no valid trace id (16 bytes) and span id (8 bytes)")
                else:
                    entry = Entry(span, attrs, resource, _sequence(seq) if seq is not None else None)
                    batch.spans.setdefault((str(rid), str(aid)), []).append(entry)
    return batch


def to_span(entry: Entry, ids: tuple[str, str], seq: int) -> Span:
    """One OTLP span as the store's span of attempt ``ids`` with sequence id ``seq``."""
    span = entry.span
    events = [
        SpanEventInfo(name=e.name, timestamp=_seconds(e.time_unix_nano), attributes=_attributes(e.attributes))
        for e in span.events
    ]
    return Span(
        rollout_id=ids[0],
        attempt_id=ids[1],
        sequence_id=seq,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_id=span.parent_span_id.hex() if len(span.parent_span_id) == 8 else None,
        name=span.name,
        status=SpanStatus(status_code=_STATUS.get(span.status.code, "UNSET"), description=span.status.message or None),
        attributes=entry.attributes,
        events=events,
        start_time=_seconds(span.start_time_unix_nano),
        end_time=_seconds(span.end_time_unix_nano),
        resource_attributes=entry.resource,
    )


async def _exists(store: Store, ids: tuple[str, str], known: set[tuple[str, str]]) -> bool:
    """Whether the attempt exists (checked before any sequence id is taken for it)."""
    if ids in known:
        return True
    try:
        attempts = await store.get_attempts(ids[0])
    except InvalidCommand:  # unknown, or an id no subject can hold
        return False
    if all(a.attempt_id != ids[1] for a in attempts):
        return False
    if len(known) >= KNOWN_KEPT:
        known.clear()
    known.add(ids)
    return True


async def ingest(store: Store, batch: Batch, known: set[tuple[str, str]]) -> ExportTraceServiceResponse:
    """Record the batch's spans, attempt by attempt; an attempt that does not exist rejects its spans."""
    for ids, entries in batch.spans.items():
        if not await _exists(store, ids, known):
            batch.reject(len(entries), f"no attempt {ids[1][:60]!r} of rollout {ids[0][:60]!r}")
            continue
        missing = [i for i, e in enumerate(entries) if e.sequence_id is None]
        given = await store.get_many_span_sequence_ids([ids] * len(missing)) if missing else []
        seqs = [e.sequence_id or 0 for e in entries]
        for i, seq in zip(missing, given, strict=True):
            seqs[i] = seq
        await store.add_many_spans([to_span(e, ids, seq) for e, seq in zip(entries, seqs, strict=True)])
    response = ExportTraceServiceResponse()
    if batch.rejected:
        response.partial_success.rejected_spans = batch.rejected
        response.partial_success.error_message = "; ".join(batch.reasons)
    return response
