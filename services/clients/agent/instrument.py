"""Capturing OpenAI client calls made inside an agent as spans of the current attempt, without a gateway.

``instrument_openai(tracer)`` wraps the official client's chat completion ``create`` and ``parse`` and
text completion ``create`` (sync and async, ``with_raw_response`` included). Inside an attempt, each
call becomes a span ``openai.<kind>.<method>`` with the request, the response, usage, and, when the
server returns them (vLLM does), token ids and logprobs. Outside an attempt the client is untouched.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from .otel import LogTracer, current_attempt

_ORIGINALS: dict[tuple[type, str], Any] = {}
PREFIX = "voltbus.llm"


def _targets() -> list[tuple[type, str, str]]:
    from openai.resources.chat.completions import AsyncCompletions as AsyncChat
    from openai.resources.chat.completions import Completions as Chat
    from openai.resources.completions import AsyncCompletions, Completions

    chat = [(cls, method, "chat") for cls in (Chat, AsyncChat) for method in ("create", "parse")]
    return [*chat, (Completions, "create", "text"), (AsyncCompletions, "create", "text")]


def _dump(value: Any) -> Any:
    """The response as a dict: a model dumped; ``with_raw_response``'s ``LegacyAPIResponse`` parsed first (its
    body is read already, and ``parse()`` caches, so the agent's own ``parse()`` gets the same object); a
    ``with_streaming_response`` body, not read yet, is left to the agent (the span keeps the request)."""
    if type(value).__name__ == "LegacyAPIResponse" and callable(getattr(value, "parse", None)):
        value = value.parse()  # by name: the class lives in a private module of the openai package
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return value if isinstance(value, dict) else {}


def call_attributes(kind: str, request: dict[str, Any], response: Any) -> dict[str, Any]:
    """Span attributes of one call: request, response, usage, token ids and logprobs when present.

    >>> attrs = call_attributes("chat", {"model": "m", "messages": []},
    ...     {"usage": {"prompt_tokens": 3}, "prompt_token_ids": [1, 2, 3],
    ...      "choices": [{"token_ids": [7], "logprobs": {"content": [{"token": "x", "logprob": -0.5}]}}]})
    >>> attrs["voltbus.llm.prompt_token_ids"], attrs["voltbus.llm.response_token_ids"], attrs["voltbus.llm.logprobs"]
    ([1, 2, 3], [7], [-0.5])
    """
    body = _dump(response) if response is not None else {}
    attrs: dict[str, Any] = {
        f"{PREFIX}.kind": kind,
        f"{PREFIX}.model": str(request.get("model", "")),
        f"{PREFIX}.request": json.dumps(request, default=str),
        f"{PREFIX}.response": json.dumps(body, default=str),
    }
    for key, value in (body.get("usage") or {}).items():
        if isinstance(value, int | float):
            attrs[f"{PREFIX}.usage.{key}"] = value
    choice = (body.get("choices") or [{}])[0] or {}
    if isinstance(body.get("prompt_token_ids"), list):
        attrs[f"{PREFIX}.prompt_token_ids"] = [int(t) for t in body["prompt_token_ids"]]
    if isinstance(choice.get("token_ids"), list):
        attrs[f"{PREFIX}.response_token_ids"] = [int(t) for t in choice["token_ids"]]
    content = ((choice.get("logprobs") or {}).get("content")) or []
    if content and all(isinstance(c, dict) and "logprob" in c for c in content):
        attrs[f"{PREFIX}.logprobs"] = [float(c["logprob"]) for c in content]
    return attrs


def _wrap(tracer: LogTracer, original: Any, kind: str, method: str, is_async: bool) -> Any:
    name = f"openai.{'chat.completions' if kind == 'chat' else 'completions'}.{method}"

    def record(request: dict[str, Any], response: Any, error: BaseException | None, started: float) -> None:
        span = tracer.otel.start_span(name, start_time=int(started * 1e9))
        streamed = bool(request.get("stream"))
        try:
            attributes = call_attributes(kind, request, None if streamed or error else response)
        except Exception as exc:  # a response we cannot read: the call is still recorded, the agent unharmed
            attributes = call_attributes(kind, request, None) | {f"{PREFIX}.response_error": repr(exc)[:500]}
        span.set_attributes(attributes)
        if error is not None:
            span.set_attribute("exception.type", type(error).__name__)
            span.set_attribute("exception.message", str(error))
        span.end()

    if is_async:

        @functools.wraps(original)
        async def async_create(self: Any, *args: Any, **kwargs: Any) -> Any:
            if current_attempt.get() is None:
                return await original(self, *args, **kwargs)
            started, error, response = time.time(), None, None
            try:
                response = await original(self, *args, **kwargs)
                return response
            except BaseException as exc:
                error = exc
                raise
            finally:
                record(kwargs, response, error, started)

        return async_create

    @functools.wraps(original)
    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        if current_attempt.get() is None:
            return original(self, *args, **kwargs)
        started, error, response = time.time(), None, None
        try:
            response = original(self, *args, **kwargs)
            return response
        except BaseException as exc:
            error = exc
            raise
        finally:
            record(kwargs, response, error, started)

    return create


def instrument_openai(tracer: LogTracer) -> bool:
    """Wrap the OpenAI client's create and parse methods; False when the openai package is absent."""
    try:
        targets = _targets()
    except ImportError:
        return False
    for cls, method, kind in targets:
        if (cls, method) in _ORIGINALS:
            continue
        original = getattr(cls, method)
        _ORIGINALS[(cls, method)] = original
        setattr(cls, method, _wrap(tracer, original, kind, method, cls.__name__.startswith("Async")))
    return True


def uninstrument_openai() -> None:
    """Restore the original methods."""
    for (cls, name), original in _ORIGINALS.items():
        setattr(cls, name, original)
    _ORIGINALS.clear()
