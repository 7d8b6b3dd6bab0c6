"""Input limits on what an agent sends, each refused before the engine or the bus sees it.

Sizes past a limit answer 413 (``body_too_large``), counts past a limit 400 (``limit_exceeded``);
the message names the setting to raise. Nothing is cut: a refused call or event is not forwarded or
recorded at all, and the agent is told why.
"""

from __future__ import annotations

from typing import Any

from voltbus.services.settings import GatewaySettings

from .errors import GatewayError

MAX_EVENT_TYPE = 128
"""Longest event type name (it becomes part of a span name)."""


def over(what: str, count: int, limit: int, setting: str) -> GatewayError:
    """The 400 for a count past its limit."""
    return GatewayError(400, "limit_exceeded", f"{what}: {count}, over the limit of {limit} (gateway.{setting})")


def check_call(body: dict[str, Any], settings: GatewaySettings) -> None:
    """Refuse a model call with too many messages, choices or prompt tokens.

    >>> check_call({"messages": [{}] * 3, "n": 2, "prompt": [1, 2]}, GatewaySettings())
    >>> check_call({"n": 1000}, GatewaySettings())
    Traceback (most recent call last):
    ...
    voltbus.services.gateway.errors.GatewayError: choices asked (n): 1000, over the limit of 64 (gateway.max_n)
    """
    messages = body.get("messages")
    if isinstance(messages, list) and len(messages) > settings.max_messages:
        raise over("messages in the call", len(messages), settings.max_messages, "max_messages")
    n = body.get("n")
    if isinstance(n, int) and n > settings.max_n:
        raise over("choices asked (n)", n, settings.max_n, "max_n")
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        tokens = sum(len(p) if isinstance(p, list) else 1 for p in prompt)
        if tokens > settings.max_prompt_tokens:
            raise over("prompt token ids (or prompts)", tokens, settings.max_prompt_tokens, "max_prompt_tokens")


def check_event(kind: str, data: Any, settings: GatewaySettings) -> None:
    """Refuse an agent event whose type name is too long or whose data has too many fields."""
    if len(kind) > MAX_EVENT_TYPE:
        raise GatewayError(400, "limit_exceeded", f"event type longer than {MAX_EVENT_TYPE} characters")
    fields = len(data) if isinstance(data, dict | list) else 1
    if isinstance(data, dict) and isinstance(data.get("dimensions"), dict):
        fields += len(data["dimensions"])
    if fields > settings.max_event_fields:
        raise over("fields in the event's data", fields, settings.max_event_fields, "max_event_fields")
