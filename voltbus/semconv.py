"""Agent Lightning's ``semconv`` module: span names and attribute keys with the same string values (the same
objects as ``voltbus.semconv``, the attribute ``import voltbus`` gives)."""

from __future__ import annotations

from voltbus.services.clients.telemetry.semconv import (
    AGL_ANNOTATION,
    AGL_EXCEPTION,
    AGL_MESSAGE,
    AGL_OBJECT,
    AGL_OPERATION,
    AGL_REWARD,
    AGL_VIRTUAL,
    EXCEPTION_ESCAPED,
    EXCEPTION_MESSAGE,
    EXCEPTION_STACKTRACE,
    EXCEPTION_TYPE,
    LightningResourceAttributes,
    LightningSpanAttributes,
    LinkAttributes,
    LinkMatch,
    LinkPydanticModel,
    RewardAttributes,
    RewardDimension,
    RewardPydanticModel,
)

__all__ = [
    "AGL_ANNOTATION",
    "AGL_EXCEPTION",
    "AGL_MESSAGE",
    "AGL_OBJECT",
    "AGL_OPERATION",
    "AGL_REWARD",
    "AGL_VIRTUAL",
    "EXCEPTION_ESCAPED",
    "EXCEPTION_MESSAGE",
    "EXCEPTION_STACKTRACE",
    "EXCEPTION_TYPE",
    "LightningResourceAttributes",
    "LightningSpanAttributes",
    "LinkAttributes",
    "LinkMatch",
    "LinkPydanticModel",
    "RewardAttributes",
    "RewardDimension",
    "RewardPydanticModel",
]
