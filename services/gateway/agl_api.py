"""Agent Lightning 1.0's rollout and model routes on the gateway, over voltbus's log (``routes/rollouts.py``,
``routes/models.py``, ``routes/events.py`` of AL 1.0's server).

* ``POST /api/rollouts`` (admin key): a JSON list of ``RolloutCreate``; 201 with the rollouts; a caller's
  ``rollout_id`` that exists already gives that rollout back unchanged (idempotent creation).
* ``GET /api/rollouts/{rid}`` (the rollout's agent key, or admin): ``{"rollout", "attempts"}``.
* ``GET /api/rollouts/{rid}/events?event_type=&format=triplet`` (admin): the latest attempt's events.
* ``DELETE /api/rollouts/{rid}`` (admin): 204; an active rollout is cancelled (403 when the gateway's bus user
  may not: an end by authority), the record is kept.
* ``POST /api/models`` (admin): checks each ``{model, endpoint}`` is one of this gateway's engines; 409 if not.
* ``DELETE /api/models`` (admin): 409, the engines are settings (pause the gateway to stop calls).
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from voltbus.schemas.errors import ConcurrencyConflict, InvalidCommand, PermissionDenied, UnknownRollout, VoltbusError
from voltbus.schemas.spans import items_of
from voltbus.services.clients.store import Store
from voltbus.services.eventlog import Envelope
from voltbus.services.httpguard import BodyTooLarge, bounded_body

from .agl_shapes import CREATE, al_event, al_rollout, dedupe, enqueue_args, triplet
from .attribution import claimed_rollout
from .auth import require_admin, require_agent
from .errors import GatewayError, error_response
from .state import gateway_of


class Model(msgspec.Struct, kw_only=True):
    """AL 1.0's ``Model``: an engine serving ``model`` at ``endpoint`` (``/v1`` included)."""

    model: str
    endpoint: str
    version: int = 0


MODELS = msgspec.json.Decoder(list[Model])


def json_response(content: Any, status_code: int = 200) -> Response:
    """``content`` as JSON (msgspec: recorded bodies are kept as raw JSON)."""
    return Response(msgspec.json.encode(content), status_code, media_type="application/json")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body; 413 past ``limit`` bytes (read no further)."""
    try:
        return await bounded_body(request, limit)
    except BodyTooLarge as exc:
        raise GatewayError(413, "body_too_large", str(exc)) from None


def decode(decoder: msgspec.json.Decoder[Any], raw: bytes, what: str) -> Any:
    """The body decoded; 400 for bad JSON, 422 for JSON of the wrong shape."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise GatewayError(422, "invalid_request", f"{what}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise GatewayError(400, "invalid_json", f"invalid JSON in request body: {exc}") from None


async def rollout_detail(store: Store, rid: str) -> dict[str, Any]:
    """AL's ``{"rollout", "attempts"}`` of one rollout; 404 when the log has none."""
    rollout = await store.get_rollout_by_id(rid)
    if rollout is None:
        raise GatewayError(404, "not_found", f"Rollout not found: {rid}")
    attempts = await store.get_attempts(rid)
    return {"rollout": al_rollout(rollout, attempts), "attempts": [a.attempt_id for a in attempts]}


async def create_one(store: Store, args: dict[str, Any]) -> dict[str, Any]:
    """Queue one rollout, or give back the one that has its id already."""
    rid = args["rollout_id"]
    if rid is None or await store.get_rollout_by_id(rid) is None:
        try:
            rid = (await store.enqueue_rollout(**args)).rollout_id
        except ConcurrencyConflict:  # created meanwhile by a retry of the same post
            pass
    return (await rollout_detail(store, rid))["rollout"]


async def create_rollouts(request: Request) -> Response:
    """``POST /api/rollouts``: queue each ``RolloutCreate`` of the list, in order."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        items = decode(CREATE, await read_body(request, gw.settings.max_body_bytes), "a list of RolloutCreate")
        created = [await create_one(gw.store, enqueue_args(item)) for item in items]
    except GatewayError as exc:
        return exc.response()
    except InvalidCommand as exc:
        return error_response(422, "invalid_request", str(exc))
    except PermissionDenied as exc:
        return error_response(403, "forbidden", f"rollouts not queued: {exc}")
    except VoltbusError as exc:
        return error_response(503, "record_failed", f"rollouts not queued: {exc}")
    return json_response(created, status_code=201)


async def get_rollout(request: Request) -> Response:
    """``GET /api/rollouts/{rid}``: the rollout and its attempt ids (an agent may read its own)."""
    gw = gateway_of(request)
    try:
        require_agent(request, gw.settings, claimed_rollout(request))
        return json_response(await rollout_detail(gw.store, request.path_params["rid"]))
    except GatewayError as exc:
        return exc.response()


async def attempt_events(store: Store, rid: str, aid: str) -> list[dict[str, Any]]:
    """AL's events of one attempt, in the order the log holds them (one span shard is read)."""
    events: list[dict[str, Any]] = []
    async for item in store.log.replay("spans", subject=store.log.topology.span_shard(rid)):
        if not isinstance(item, Envelope):
            continue
        for event in items_of(item.event):  # type: ignore[arg-type]
            if getattr(event, "rollout_id", None) == rid and getattr(event, "attempt_id", None) == aid:
                if (shaped := al_event(event)) is not None:
                    events.append(shaped)
    return events


async def rollout_events(request: Request) -> Response:
    """``GET /api/rollouts/{rid}/events``: the latest attempt's events, ``event_type`` and ``format`` as AL."""
    gw = gateway_of(request)
    params = request.query_params
    try:
        require_admin(request, gw.settings)
        rid = claimed_rollout(request) or ""
        if params.get("format", "raw") not in ("raw", "triplet"):
            raise GatewayError(422, "invalid_request", "format must be 'raw' or 'triplet'")
        detail = await rollout_detail(gw.store, rid)
        aid = detail["rollout"]["status"]["last_attempt_id"]
        events = await attempt_events(gw.store, rid, aid) if aid else []
    except GatewayError as exc:
        return exc.response()
    if kind := params.get("event_type"):
        events = [e for e in events if e["event_type"] == kind]
    if params.get("format") == "triplet":
        events = dedupe([triplet(e) for e in events])
    return json_response(events)


async def delete_rollout(request: Request) -> Response:
    """``DELETE /api/rollouts/{rid}``: 204; a rollout still queued or running is cancelled (the log keeps all)."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        rid = claimed_rollout(request) or ""
        rollout = await gw.store.get_rollout_by_id(rid)
        if rollout is not None and rollout.status not in ("succeeded", "failed", "cancelled"):
            await gw.store.cancel_rollout(rid, "deleted through DELETE /api/rollouts")
    except GatewayError as exc:
        return exc.response()
    except (UnknownRollout, InvalidCommand):  # ended meanwhile
        pass
    except PermissionDenied as exc:  # a cancel is an end by authority: the gateway's bus user may not (security.md)
        return error_response(403, "forbidden", f"rollout not cancelled: {exc}")
    except VoltbusError as exc:
        return error_response(503, "record_failed", f"rollout not cancelled: {exc}")
    return Response(status_code=204)


async def register_models(request: Request) -> Response:
    """``POST /api/models``: 201 when every endpoint is one of this gateway's engines, else 409 naming them."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        models = decode(MODELS, await read_body(request, 64 * 1024), "a list of Model")
    except GatewayError as exc:
        return exc.response()
    engines = [e.rstrip("/") for e in gw.settings.engines]
    unknown = [m.endpoint for m in models if m.endpoint.rstrip("/") not in engines]
    if unknown:
        message = (
            f"not engines of this gateway: {', '.join(unknown)}; voltbus's gateway routes to its configured engines "
            f"(gateway.upstream_urls: {', '.join(engines)})"
        )
        return error_response(409, "unknown_engine", message)
    return json_response(msgspec.to_builtins(models), status_code=201)


async def delete_models(request: Request) -> Response:
    """``DELETE /api/models``: 409: the engines are settings; ``POST /proxy/pause`` stops calls instead."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
    except GatewayError as exc:
        return exc.response()
    message = "the gateway's engines are settings (gateway.upstream_urls): pause it (POST /proxy/pause) to stop calls"
    return error_response(409, "engines_are_settings", message)


def routes() -> list[Route]:
    """AL 1.0's rollout and model routes."""
    return [
        Route("/api/rollouts", create_rollouts, methods=["POST"]),
        Route("/api/rollouts/{rid}", get_rollout, methods=["GET"]),
        Route("/api/rollouts/{rid}", delete_rollout, methods=["DELETE"]),
        Route("/api/rollouts/{rid}/events", rollout_events, methods=["GET"]),
        Route("/api/models", register_models, methods=["POST"]),
        Route("/api/models", delete_models, methods=["DELETE"]),
    ]
