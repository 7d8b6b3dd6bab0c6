"""Refusals in the OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from starlette.responses import JSONResponse


class RequestError(Exception):
    """A request the server will not run; answered with ``status`` and an OpenAI-shaped body."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.kind, self.param = message, status, kind, param

    def response(self) -> JSONResponse:
        return error_response(self.message, self.status, self.kind, self.param)


def error_response(message: str, status: int, kind: str, param: str | None = None) -> JSONResponse:
    """The JSON answer for a refusal."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)
