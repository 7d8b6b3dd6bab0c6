"""Error answers in the OpenAI shape (``{"error": {"message", "type", ...}}``) that SDKs understand."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


class GatewayError(Exception):
    """A refusal with an HTTP status; raised by the handlers' helpers, answered as JSON."""

    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.extra = status, kind, message, extra

    def response(self) -> JSONResponse:
        """The JSON answer."""
        return error_response(self.status, self.kind, self.message, **self.extra)


def error_response(status: int, kind: str, message: str, **extra: Any) -> JSONResponse:
    """``{"error": {"message": ..., "type": kind, "code": status, **extra}}`` with that status."""
    return JSONResponse({"error": {"message": message, "type": kind, "code": status, **extra}}, status_code=status)
