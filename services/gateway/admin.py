"""Admin routes: pause, resume, in-flight (``/admin/*``, and AL 1.0's ``/proxy/pause|resume|state``).

``POST /admin/pause`` takes ``{"retry_after_seconds": 5, "reason": "..."}`` (both optional);
``GET /admin/inflight?wait_s=30`` waits up to ``wait_s`` for the in-flight count to reach 0 and
answers the state with ``drained`` and the ``versions`` the engines serve (the learner's drain
before a weight swap). ``POST /admin/resume`` may take ``{"versions": {"<engine URL>": "<resources
id>" | null}}``: what each engine serves from then on (``versions``), set as calls are admitted again.
Each pause and resume is recorded first (``GatewayPaused`` / ``GatewayResumed`` on the control
stream) and only then takes effect; if the bus refuses the event, the state is unchanged and the
answer is 503.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from voltbus.schemas.gateway import GatewayPaused, GatewayResumed

from .auth import require_admin
from .errors import GatewayError, error_response
from .state import Gateway, gateway_of, read_json

log = logging.getLogger(__name__)


async def pause(request: Request) -> Response:
    """Refuse new calls (429) until resumed; in-flight calls finish."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        body = await read_json(request, 64 * 1024)
        retry = body.get("retry_after_seconds")
        retry_s = int(retry) if retry is not None else gw.pause.retry_after_s
        reason = str(body["reason"]) if body.get("reason") is not None else None
    except GatewayError as exc:
        return exc.response()
    except (TypeError, ValueError):
        return error_response(400, "invalid_request", "retry_after_seconds must be an integer")
    event = GatewayPaused(
        event_id=uuid.uuid4().hex,
        gateway_id=gw.gateway_id,
        reason=reason,
        retry_after_s=max(0, retry_s),
        inflight=gw.pause.inflight,
        at=time.time(),
    )
    if (failed := await gw.announce(event)) is not None:
        return error_response(503, "record_failed", f"pause not recorded, so not applied: {failed}")
    gw.pause.pause(event.retry_after_s, reason)
    log.info("gateway/paused reason=%s inflight=%d", gw.pause.reason, gw.pause.inflight)
    return JSONResponse(gw.pause.snapshot())


def read_versions(body: dict[str, Any], gw: Gateway) -> dict[str, str | None]:
    """A resume's ``versions`` (engine URL → resources version or null), keyed by engine root;
    GatewayError 400 for a malformed map or an engine this gateway does not have."""
    versions = body.get("versions") or {}
    if not isinstance(versions, dict) or not all(v is None or isinstance(v, str) for v in versions.values()):
        raise GatewayError(400, "invalid_request", "versions must map engine URLs to a version string or null")
    try:
        return gw.versions.check(versions)
    except KeyError as exc:
        raise GatewayError(400, "unknown_engine", str(exc.args[0])) from None


async def resume(request: Request) -> Response:
    """Admit new calls again; with ``{"versions": {engine: resources_id}}``, label the calls those
    engines serve from now on with that version (``versions``)."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        versions = read_versions(await read_json(request, 64 * 1024), gw)
    except GatewayError as exc:
        return exc.response()
    since = gw.pause.paused_since
    paused_s = time.monotonic() - since if since is not None else None
    event = GatewayResumed(
        event_id=uuid.uuid4().hex, gateway_id=gw.gateway_id, paused_s=paused_s, versions=versions, at=time.time()
    )
    if (failed := await gw.announce(event)) is not None:
        return error_response(503, "record_failed", f"resume not recorded, so not applied: {failed}")
    gw.versions.set(versions)  # before any call is admitted again
    gw.pause.resume()
    log.info("gateway/resumed versions=%s", versions or "unchanged")
    return JSONResponse({**gw.pause.snapshot(), "versions": gw.versions.snapshot()})


async def inflight(request: Request) -> Response:
    """The pause state; with ``wait_s``, after waiting (bounded) for in-flight calls to finish."""
    gw = gateway_of(request)
    try:
        require_admin(request, gw.settings)
        wait_s = float(request.query_params.get("wait_s", 0))
    except GatewayError as exc:
        return exc.response()
    except ValueError:
        return error_response(400, "invalid_request", "wait_s must be a number")
    drained = await gw.pause.wait_drained(wait_s) if wait_s > 0 else gw.pause.inflight == 0
    return JSONResponse({**gw.pause.snapshot(), "drained": drained, "versions": gw.versions.snapshot()})
