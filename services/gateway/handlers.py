"""Model-call handlers: check, attribute, rewrite, forward, record, answer.

Order for a call: auth (401/403), pause (429, checked again once the call counts as in flight, so a
drain that ended never misses it), attribution (404 for an unknown rollout or attempt,
403 for an ended one), body (413 over the limit, 400 malformed or past a count limit: ``limits``),
then the engine. A Responses or Anthropic Messages call (``client_api``) is translated to chat
once its body is read (400 for what cannot be) and answered, errors included, in its own shape.
The engine's answer and status pass through; when every try fails (5xx, timeout, no connection,
on each engine tried; see ``upstream``) the answer is 502 (504 for a timeout) naming the engines tried.
Every forwarded call is recorded as one ``ModelCalled``; a non-streamed call whose event the bus
refuses is answered 503 (the agent retries) so no sampled call goes untrained-on unnoticed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voltbus.services.settings import GatewaySettings

from .attribution import UNATTRIBUTED, claimed_rollout
from .auth import require_agent
from .client_api import ClientApi
from .errors import GatewayError, error_response
from .limits import check_call
from .record import Call, model_called
from .rewrite import Kind, rewrite_body
from .state import Gateway, gateway_of, read_json
from .streaming import stream_call
from .upstream import Outcome, failure_answer, routing_key

log = logging.getLogger(__name__)


async def begin(request: Request, kind: Kind, client: ClientApi | None = None) -> tuple[Gateway, Call]:
    """Everything before the engine is called: auth, pause, attribution, body (translated to chat
    for a ``client`` API), rewriting."""
    gw = gateway_of(request)
    require_agent(request, gw.settings, claimed_rollout(request))
    if gw.pause.paused:
        raise GatewayError(429, "gateway_paused", "gateway paused")
    rid, aid, mode = await gw.attribution.resolve(request)
    original = await read_json(request, gw.settings.max_body_bytes)
    body = client.to_chat(original) if client is not None else original
    check_call(body, gw.settings)
    attributed = rid != UNATTRIBUTED
    model = gw.settings.model_name if attributed else None
    forwarded, rewritten = rewrite_body(body, kind, model=model, temperature=mode_temperature(gw.settings, mode))
    call = Call(rid, aid, kind, forwarded, rewritten, "", streamed=bool(body.get("stream")), mode=mode)
    call.client, call.client_request = client, original if client is not None else {}
    try:
        call.body  # noqa: B018 (encoded once, here: a body too deep to encode is the agent's 400, not a 500)
    except RecursionError:
        raise GatewayError(400, "invalid_json", "request body nested too deeply to forward") from None
    return gw, call


def mode_temperature(settings: GatewaySettings, mode: str | None) -> float | None:
    """The temperature forced for a call of ``mode``; None leaves the agent's."""
    if mode == "train":
        return settings.train_temperature
    return settings.val_temperature if mode in ("val", "test") else None


async def finish(gw: Gateway, call: Call) -> Response:
    """Forward a non-streamed call, record it, answer the agent."""
    outcome = await gw.upstream.call(call.path, call.body, routing_key(call.rollout_id))
    call.upstream = outcome.upstream
    answer, error = failure_answer(outcome)
    status, retries = outcome.status, outcome.retries
    served = gw.served_version(call)
    event = model_called(
        call, outcome.body, http_status=status, retries=retries, error=error, raw=outcome.raw, served=served
    )
    failed = await gw.record([event]) if call.rollout_id != "unattributed" or gw.settings.record_unattributed else None
    log.debug(
        "gateway/call rollout_id=%s attempt_id=%s call_id=%s status=%s latency_s=%.4f",
        call.rollout_id,
        call.attempt_id,
        call.call_id,
        outcome.status,
        event.latency_s,
    )
    if answer is not None:
        return answer
    if failed is not None:
        return error_response(503, "record_failed", f"model call could not be recorded: {failed}")
    if call.client is not None and (outcome.status or 0) < 400:
        return JSONResponse(call.client.answer(call.client_request, outcome.body, call.call_id))
    return passed_on(outcome)


def passed_on(outcome: Outcome) -> Response:
    """The engine's answer for the agent: its JSON bytes unchanged when they parsed, else re-encoded."""
    if outcome.raw is not None:
        return Response(outcome.raw, status_code=outcome.status or 502, media_type="application/json")
    return JSONResponse(outcome.body, status_code=outcome.status or 502)


def proxy(kind: Kind, client: ClientApi | None = None) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint for one API (chat or completions; or a ``client`` API forwarded as chat and
    answered, errors included, in its own shape), shared by every route shape."""
    if client is None:
        return _proxy(kind, None)
    inner = _proxy(kind, client)

    async def translated(request: Request) -> Response:
        answer = await inner(request)
        return client.error(answer) if answer.status_code >= 400 else answer

    return translated


def _proxy(kind: Kind, client: ClientApi | None) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            gw, call = await begin(request, kind, client)
        except GatewayError as exc:
            return gw_refusal(request, exc)
        await gw.pause.enter()
        if gw.pause.paused:  # paused while this call was being read: a drain may have ended without it
            await gw.pause.leave()
            return gw.pause.refusal()
        call.epoch = gw.versions.epoch
        if call.streamed:
            return await stream_call(gw, call)  # the stream leaves the in-flight count when it ends
        try:
            return await finish(gw, call)
        finally:
            await gw.pause.leave()

    return endpoint


def gw_refusal(request: Request, exc: GatewayError) -> Response:
    """A refusal answer; a paused refusal carries ``Retry-After`` and ``X-Agl-Paused``."""
    if exc.status == 429:
        return gateway_of(request).pause.refusal()
    return exc.response()


async def models(request: Request) -> Response:
    """``GET /v1/models``: the engine's list, passed through."""
    gw = gateway_of(request)
    try:
        require_agent(request, gw.settings, claimed_rollout(request))
    except GatewayError as exc:
        return exc.response()
    outcome = await gw.upstream.get("models")
    answer, _ = failure_answer(outcome)
    return answer if answer is not None else passed_on(outcome)


async def healthz(request: Request) -> Response:
    """Liveness (no auth): ``status`` (``ok``, or ``degraded`` when every engine is down), the pause
    state, and the health view of the engines (``engines``: URL, ``up``/``down``, failures, last error)."""
    gw = gateway_of(request)
    health = gw.upstream.health()
    status = "ok" if health["engines_up"] else "degraded"
    body: dict[str, Any] = {"status": status, **gw.pause.snapshot(), **health}
    return JSONResponse(body)
