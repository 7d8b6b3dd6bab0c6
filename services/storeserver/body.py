"""Reading request bodies within the size limit: 413 past it (read no further), gzip undone under the same cap."""

from __future__ import annotations

import zlib
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from voltbus.services.httpguard import BodyTooLarge, bounded_body

from .errors import HttpError
from .wire import LIST_PARAMS

T = TypeVar("T")


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body (gunzipped when ``Content-Encoding: gzip``); 413 past ``limit`` bytes either way."""
    try:
        raw = await bounded_body(request, limit)
    except BodyTooLarge as exc:
        raise HttpError(413, "too_large", str(exc)) from None
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "gzip":
        return gunzip(raw, limit)
    if encoding not in ("identity", ""):
        raise HttpError(415, "content_encoding", f"Content-Encoding {encoding[:40]!r} is not supported (gzip is)")
    return raw


def gunzip(raw: bytes, limit: int) -> bytes:
    """``raw`` decompressed, at most ``limit`` bytes of it (a gzip bomb stops there with 413).

    >>> import gzip
    >>> gunzip(gzip.compress(b"abc"), 10)
    b'abc'
    """
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise HttpError(400, "invalid_gzip", f"the gzip body does not decompress: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise HttpError(413, "too_large", f"request body over {limit} bytes once decompressed")
    return out


async def read_json(request: Request, limit: int, kind: type[T], optional: bool = False) -> T:
    """The body decoded as ``kind``; an empty (or ``null``) body is ``kind()`` when ``optional``."""
    raw = await read_body(request, limit)
    if optional and raw.strip() in (b"", b"null"):
        return kind()
    if not raw.strip():
        raise HttpError(400, "invalid_request", "this route needs a JSON body")
    return msgspec.json.decode(raw, type=kind)


def read_query(request: Request, kind: type[T], **path: Any) -> T:
    """The query string (and path parameters) as ``kind``: numbers from their text, repeated list parameters."""
    params: dict[str, Any] = dict(path)
    for key in request.query_params:
        values = request.query_params.getlist(key)
        params[key] = values if key in LIST_PARAMS else values[-1]
    return msgspec.convert(params, kind, strict=False)
