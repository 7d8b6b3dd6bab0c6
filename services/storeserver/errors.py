"""Refusals of the store server: one HTTP status per kind of error, answered as ``{"detail", "code"}`` (the
``detail`` key Agent Lightning's FastAPI server answers with). Every error a request can cause is a 4xx or a 503."""

from __future__ import annotations

import logging

import msgspec
from starlette.responses import JSONResponse

from voltbus.schemas.errors import (
    AttemptLimit,
    BusUnavailable,
    ConcurrencyConflict,
    IllegalTransition,
    PayloadTooLarge,
    PermissionDenied,
    PublishFailed,
    UnknownAttempt,
    UnknownRollout,
    VoltbusError,
)
from voltbus.services.clients.store.queries import ProjectorUnavailable

log = logging.getLogger(__name__)


class HttpError(Exception):
    """A refusal with its status, raised by the handlers' helpers."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """``{"detail": message, "code": code}`` with ``status``."""
    return JSONResponse({"detail": message, "code": code}, status_code=status)


_STATUS: list[tuple[type[BaseException], int, str]] = [
    (UnknownRollout, 404, "not_found"),
    (UnknownAttempt, 404, "not_found"),
    (IllegalTransition, 409, "conflict"),
    (AttemptLimit, 409, "conflict"),
    (ConcurrencyConflict, 409, "conflict"),
    (PayloadTooLarge, 413, "too_large"),
    (PermissionDenied, 403, "bus_permission"),
    (ProjectorUnavailable, 503, "projector_unavailable"),
    (BusUnavailable, 503, "bus_unavailable"),
    (PublishFailed, 503, "bus_unavailable"),
    (TimeoutError, 503, "timeout"),
    (msgspec.ValidationError, 422, "invalid_request"),
    (msgspec.DecodeError, 400, "invalid_json"),
    (VoltbusError, 400, "invalid_request"),
]
"""First match wins: subclasses before their bases (``msgspec.ValidationError`` is a ``DecodeError``)."""


def answer(exc: BaseException) -> JSONResponse:
    """The answer to ``exc`` raised while serving a request; an error no row names is a bug: 500, logged."""
    if isinstance(exc, HttpError):
        return error_response(exc.status, exc.code, exc.message)
    for kind, status, code in _STATUS:
        if isinstance(exc, kind):
            return error_response(status, code, str(exc) or type(exc).__name__)
    log.exception("store server: unexpected error", exc_info=exc)
    return error_response(500, "internal", f"internal error ({type(exc).__name__}); see the store server's log")
