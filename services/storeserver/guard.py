"""Who may call the store server: the token (``Authorization: Bearer <token>``, or HTTP Basic with the token as
password, which Agent Lightning's client sends for ``http://agl:<token>@host:port``), a ``Host`` naming this machine
or an allowed name (no DNS rebinding), no other web page's ``Origin``, and bodies of JSON (or protobuf on
``/v1/traces``) only, so no web form can post. ``/v1/agl/health`` needs no token. Threat model: docs/security.md."""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from voltbus.services.httpguard import LOOPBACK_HOSTS

from .errors import error_response

OPEN_PATHS = frozenset({"/v1/agl/health"})
TRACES = "/v1/traces"
JSON = "application/json"
PROTOBUF = "application/x-protobuf"


def guard(app: ASGIApp, bind_host: str, extra_hosts: list[str], token: str | None) -> ASGIApp:
    """``app`` behind the Host check (loopback names, ``bind_host``, ``extra_hosts``), then Origin, token and body
    type checks."""
    hosts = LOOPBACK_HOSTS + ([] if bind_host in ("0.0.0.0", "::", "") else [bind_host]) + extra_hosts
    return TrustedHostMiddleware(_Checks(app, token), allowed_hosts=hosts, www_redirect=False)


class _Checks:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = _refusal(Headers(scope=scope), scope, self.token)
        await (refusal or self.app)(scope, receive, send)


def _refusal(headers: Headers, scope: Scope, token: str | None):  # noqa: ANN202 (a Response or None)
    origin = headers.get("origin")
    if origin is not None and origin.split("://", 1)[-1] != headers.get("host"):
        return error_response(403, "origin", f"requests from another web page (Origin: {origin[:100]}) are refused")
    if token and scope["path"] not in OPEN_PATHS and not carries(headers.get("authorization", ""), token):
        answer = error_response(401, "unauthorized", "send the store server's token: Authorization: Bearer <token>")
        answer.headers["WWW-Authenticate"] = 'Bearer, Basic realm="voltbus store"'
        return answer
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    if scope["method"] == "POST" and (has_body or "content-type" in headers):
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        allowed = (JSON, PROTOBUF) if scope["path"] == TRACES else (JSON,)
        if kind not in allowed:
            return error_response(415, "content_type", f"send a body of {' or '.join(allowed)}, not {kind[:60]!r}")
    return None


def carries(authorization: str, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``token``: as a bearer token, or as Basic's password.

    >>> basic = "Basic " + base64.b64encode(b"agl:s3cret").decode()
    >>> carries("Bearer s3cret", "s3cret"), carries(basic, "s3cret"), carries(basic, "other"), carries("", "s3cret")
    (True, True, False, False)
    """
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() == "basic":
        try:
            given = base64.b64decode(given.strip(), validate=True).decode().partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return False
    elif scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(errors="replace"), token.encode())
