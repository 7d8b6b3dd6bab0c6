"""Who may reach a voltbus read endpoint, and from where: a bearer token, a ``Host`` header naming this machine or an
allowed name (no DNS rebinding), no other web page's ``Origin``, JSON bodies only (no form a page can post).

Used by the projector's SQL endpoint and the dashboard; the threat model is in docs/security.md.
"""

from __future__ import annotations

import hmac
import logging

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from voltbus.schemas.errors import VoltbusError

from .sockets import is_loopback

log = logging.getLogger(__name__)
LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1"]
ALL: frozenset[str] = frozenset()
"""``guard``'s default ``token_paths``: every path but ``/health``."""


class Exposed(VoltbusError):
    """An endpoint with no token set up to listen beyond this machine."""


def check_exposure(what: str, host: str, token: str | None, setting: str) -> None:
    """Refuse to serve ``what`` beyond loopback without a token; warn that a loopback one has none."""
    if token:
        return
    if not is_loopback(host):
        raise Exposed(
            f"{what} would listen on {host} with no token: set {setting} (voltbus up and compose generate one),"
            " or listen on 127.0.0.1"
        )
    log.warning("%s has no token (%s): every process on this machine may use it", what, setting)


def guard(
    app: ASGIApp, bind_host: str, extra_hosts: list[str], token: str | None = None, token_paths: frozenset[str] = ALL
) -> ASGIApp:
    """``app`` behind the checks: Host (loopback names, ``bind_host`` and ``extra_hosts``), Origin, JSON, and the
    token on ``token_paths`` (default: every path but ``/health``)."""
    hosts = LOOPBACK_HOSTS + ([] if bind_host in ("0.0.0.0", "::", "") else [bind_host]) + extra_hosts
    return TrustedHostMiddleware(_Checks(app, token, token_paths), allowed_hosts=hosts, www_redirect=False)


class _Checks:
    """Origin, bearer token (every route but ``/health``) and the content type of every POST with a body (a page's
    bodiless POST carries its Origin, refused above)."""

    def __init__(self, app: ASGIApp, token: str | None, paths: frozenset[str]) -> None:
        self.app, self.token, self.paths = app, token, paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = self.token if scope["type"] == "http" and _needs_token(scope["path"], self.paths) else None
        refusal = _refusal(Headers(scope=scope), scope, token) if scope["type"] == "http" else None
        if refusal is None:
            await self.app(scope, receive, send)
        else:
            await refusal(scope, receive, send)


def _refusal(headers: Headers, scope: Scope, token: str | None) -> JSONResponse | None:
    origin = headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != headers.get("host"):
        return _error(403, "origin", f"requests from another web page (Origin: {origin[:100]}) are refused")
    if token and not _bearer_matches(headers.get("authorization", ""), token):
        return _error(401, "unauthorized", "send the endpoint's token: Authorization: Bearer <token>", bearer=True)
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    if scope["method"] == "POST" and (has_body or "content-type" in headers) and not _json(headers):
        return _error(415, "content_type", "send a JSON body (Content-Type: application/json)")
    return None


def _needs_token(path: str, paths: frozenset[str]) -> bool:
    return path != "/health" if paths is ALL else path in paths


def _json(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


def _bearer_matches(authorization: str, token: str) -> bool:
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _error(status: int, code: str, message: str, bearer: bool = False) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if bearer else None
    return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)
