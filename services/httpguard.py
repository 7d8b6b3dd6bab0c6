"""Who may reach a voltbus read endpoint, and from where: a bearer token, a ``Host`` header naming this machine or an
allowed name (no DNS rebinding), no other web page's ``Origin``, JSON bodies only (no form a page can post).

Used by the projector's SQL endpoint, the dashboard (whose page keeps its token in a cookie) and the inference
server; the threat model is in docs/security.md.
"""

from __future__ import annotations

import hmac
import logging
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
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
    app: ASGIApp,
    bind_host: str,
    extra_hosts: list[str],
    token: str | None = None,
    token_paths: frozenset[str] = ALL,
    cookie: str | None = None,
) -> ASGIApp:
    """``app`` behind the checks: Host (loopback names, ``bind_host`` and ``extra_hosts``), Origin, JSON, and the
    token on ``token_paths`` (default: every path but ``/health``). ``cookie``: a page's name for the token, so a
    browser signs in once with ``GET /?token=<token>`` (the answer sets it, HttpOnly and SameSite=Strict)."""
    hosts = LOOPBACK_HOSTS + ([] if bind_host in ("0.0.0.0", "::", "") else [bind_host]) + extra_hosts
    return TrustedHostMiddleware(_Checks(app, token, token_paths, cookie), allowed_hosts=hosts, www_redirect=False)


class _Checks:
    """Origin, token (every route but ``/health``: a bearer header, or the page's cookie) and the content type of
    every POST with a body (a page's bodiless POST carries its Origin, refused above)."""

    def __init__(self, app: ASGIApp, token: str | None, paths: frozenset[str], cookie: str | None = None) -> None:
        self.app, self.token, self.paths, self.cookie = app, token, paths, cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = self.token if _needs_token(scope["path"], self.paths) else None
        headers = Headers(scope=scope)
        answer = self._sign_in(scope, headers) or _refusal(headers, scope, token, self.cookie)
        await (answer or self.app)(scope, receive, send)

    def _sign_in(self, scope: Scope, headers: Headers) -> Response | None:
        """``GET /?token=<token>``: the page's cookie set and the token dropped from the address (303 to ``/``)."""
        query = parse_qs(scope.get("query_string", b"").decode(errors="replace"))
        if not (self.cookie and self.token and scope["path"] == "/" and "token" in query):
            return None
        if _refusal(headers, scope, None, None) is not None or not _same(query["token"][-1], self.token):
            return _error(401, "unauthorized", "that token is not this page's: open the link voltbus up printed")
        answer = Response(status_code=303, headers={"Location": "/", "Cache-Control": "no-store"})
        answer.set_cookie(self.cookie, self.token, httponly=True, samesite="strict", path="/")
        return answer


def _refusal(headers: Headers, scope: Scope, token: str | None, cookie: str | None = None) -> JSONResponse | None:
    origin = headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != headers.get("host"):
        return _error(403, "origin", f"requests from another web page (Origin: {origin[:100]}) are refused")
    if token and not _carries(headers, token, cookie):
        how = " (a browser: open /?token=<token> once)" if cookie else ""
        message = f"send the endpoint's token: Authorization: Bearer <token>{how}"
        return _error(401, "unauthorized", message, bearer=True)
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
    return scheme.lower() == "bearer" and _same(given.strip(), token)


def _carries(headers: Headers, token: str, cookie: str | None) -> bool:
    """Whether the request carries ``token``: as a bearer header, or as the page's cookie."""
    return _bearer_matches(headers.get("authorization", ""), token) or _cookie_matches(headers, cookie, token)


def _cookie_matches(headers: Headers, cookie: str | None, token: str) -> bool:
    if cookie is None:
        return False
    jar = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except CookieError:
        return False
    return cookie in jar and _same(jar[cookie].value, token)


def _same(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode(errors="replace"), token.encode())


def _error(status: int, code: str, message: str, bearer: bool = False) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if bearer else None
    return JSONResponse({"error": message, "code": code}, status_code=status, headers=headers)


class BodyTooLarge(Exception):
    """A request body over its limit; each service answers it in its own error format (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body over {limit} bytes")


async def bounded_body(request: Request, limit: int) -> bytes:
    """The raw request body; BodyTooLarge past ``limit`` bytes, declared or streamed (read no further)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
