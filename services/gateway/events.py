"""``POST /api/rollouts/{rid}/attempt/{aid}/events``: what agents report besides model calls.

Accepts Agent Lightning 1.0's ``{"event_type": "reward", "data": {"value": 0.7, "source", "reason"}}``
and the flat ``{"type": "reward", "value": 0.7, "dimensions": {...}, "call_id": ...}``. A reward
becomes ``RewardReported``; any other event type becomes a zero-duration ``SpanRecorded`` named
``agl.event.<type>`` with the data as JSON in ``agl.data``. The answer is AL's ``Event`` shape.
An ``Idempotency-Key`` header makes a retried post record once. A body over ``max_event_bytes``
is refused with 413, data with more than ``max_event_fields`` fields with 400 (``limits``).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voltbus.schemas import RewardReported, SpanRecorded, derive_id

from .attribution import claimed_rollout
from .auth import require_agent
from .errors import GatewayError
from .limits import check_event
from .state import gateway_of, read_json


def reward_event(rid: str, aid: str, data: dict[str, Any], key: str, at: float) -> RewardReported:
    """A ``RewardReported`` from a reward's data (``value`` and/or ``dimensions``); 422 if it has neither."""
    try:
        return msgspec.convert(
            {
                "event_id": derive_id(rid, aid, "reward", key),
                "rollout_id": rid,
                "attempt_id": aid,
                "value": data.get("value"),
                "dimensions": data.get("dimensions") or {},
                "primary_key": data.get("primary_key"),
                "call_id": data.get("call_id"),
                "at": at,
            },
            RewardReported,
        )
    except msgspec.ValidationError as exc:
        raise GatewayError(422, "invalid_event", f"invalid reward: {exc}") from None


async def custom_event(request: Request, rid: str, aid: str, kind: str, data: Any, key: str, at: float) -> SpanRecorded:
    """Any other event type, kept as a zero-duration span of the attempt."""
    sequence = await gateway_of(request).store.log.next_sequence(rid)
    return SpanRecorded(
        event_id=derive_id(rid, aid, "event", key),
        rollout_id=rid,
        attempt_id=aid,
        sequence_id=sequence,
        trace_id=derive_id(rid, aid),
        span_id=derive_id(rid, aid, "event", key)[:16],
        name=f"agl.event.{kind}",
        start_time=at,
        end_time=at,
        attributes={"agl.event_type": kind, "agl.data": json.dumps(data)},
    )


async def post_event(request: Request) -> Response:
    """Record one agent event for a known rollout and attempt."""
    gw = gateway_of(request)
    try:
        require_agent(request, gw.settings, claimed_rollout(request))
        rid, aid, _ = await gw.attribution.resolve(request)
        body = await read_json(request, gw.settings.max_event_bytes)
        kind = str(body.get("event_type") or body.get("type") or "")
        if not kind:
            raise GatewayError(422, "invalid_event", 'an event needs "event_type" (or "type")')
        data = body.get("data") if "event_type" in body else {k: v for k, v in body.items() if k != "type"}
        check_event(kind, data, gw.settings)
        key, at = request.headers.get("idempotency-key") or uuid.uuid4().hex, time.time()
        if kind == "reward":
            event: Any = reward_event(rid, aid, data if isinstance(data, dict) else {"value": data}, key, at)
        else:
            event = await custom_event(request, rid, aid, kind, data, key, at)
    except GatewayError as exc:
        return exc.response()
    failed = await gw.record([event])
    if failed is not None:
        return JSONResponse({"error": {"message": f"event not recorded: {failed}", "code": 503}}, status_code=503)
    reply = {"event_type": kind, "rollout_id": rid, "attempt_id": aid, "timestamp": at, "data": data}
    return JSONResponse(reply)
