"""What one model call sampled — token ids, logprobs, version — read from a gateway row or a span.

Span attribute keys, first present wins: voltbus's runner capture (``voltbus.llm.*``), then Agent
Lightning's (``prompt_token_ids``, ``response_token_ids``, Weave's ``agentlightning.operation.output.*``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from .inputs import CallRow, SpanRow

PROMPT_KEYS = ("voltbus.llm.prompt_token_ids", "prompt_token_ids", "agentlightning.operation.output.prompt_token_ids")
RESPONSE_KEYS = (
    "voltbus.llm.response_token_ids",
    "response_token_ids",
    "agentlightning.operation.output.response_token_ids.0",
    "agentlightning.operation.output.choices.0.token_ids",
    "agentlightning.operation.output.choices.0.provider_specific_fields.token_ids",
)
RESPONSE_ID_KEYS = ("gen_ai.response.id", "agentlightning.operation.output.id")
CALL_ID_KEY = "voltbus.llm.call_id"
"""A span attribute naming the gateway call it made; matched before response ids."""


class Sampled(msgspec.Struct, frozen=True, kw_only=True):
    """The training-relevant content of one call."""

    prompt_ids: list[int] = []
    """Prompt token ids; empty when not recorded."""
    response_ids: list[int] = []
    """Sampled token ids; empty when not recorded."""
    logprobs: list[float] | None = None
    """One per response token; None when missing or misaligned."""
    resources_id: str | None = None
    """Resources version that generated the response."""
    model: str | None = None
    """Model name."""
    response_id: str | None = None
    """The engine's response id (``id`` of the body)."""
    call_id: str | None = None
    """The gateway call id, when known."""
    failed: bool = False
    """The call returned no usable answer (error status or exception)."""


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list | tuple) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _floats(value: Any, n: int) -> list[float] | None:
    if isinstance(value, list | tuple) and len(value) == n and all(isinstance(v, int | float) for v in value):
        return [float(v) for v in value]
    return None


class _Body(msgspec.Struct):
    """The keys of a response body that the adapter reads (msgspec skips the rest, logprobs content included)."""

    id: Any = msgspec.UNSET
    model: Any = msgspec.UNSET
    resources_id: Any = msgspec.UNSET
    weight_version: Any = msgspec.UNSET


_body_decoder = msgspec.json.Decoder(_Body)


def _body(text: Any) -> dict[str, Any]:
    """A response body's keys the adapter reads (those present), from its JSON text; {} when it is no object.

    >>> _body('{"id": "c1", "choices": [], "resources_id": null}'), _body('[1]'), _body('{"id": NaN}')
    ({'id': 'c1', 'resources_id': None}, {}, {'id': nan})
    """
    if not isinstance(text, str):
        return {}
    try:
        found = _body_decoder.decode(text)
    except msgspec.DecodeError:  # not an object, or JSON only the json module reads (NaN, Infinity)
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            return {}
        return {k: body[k] for k in _Body.__struct_fields__ if k in body} if isinstance(body, dict) else {}
    return {k: v for k in _Body.__struct_fields__ if (v := getattr(found, k)) is not msgspec.UNSET}


def _version(body: dict[str, Any]) -> str | None:
    value = body.get("resources_id", body.get("weight_version"))
    return str(value) if value is not None else None


def _span_logprobs(attributes: dict[str, Any], n: int) -> list[float] | None:
    if (found := _floats(attributes.get("voltbus.llm.logprobs"), n)) is not None:
        return found
    raw = attributes.get("logprobs.content")  # Agent Lightning: the OpenAI logprobs content as JSON text
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return None
    if isinstance(raw, list):
        return _floats([i.get("logprob") if isinstance(i, dict) else None for i in raw], n)
    return None


def from_span(span: SpanRow) -> Sampled:
    """What a runner-side model call span recorded."""
    a = span.attributes
    prompt = next((ids for k in PROMPT_KEYS if (ids := _ints(a.get(k))) is not None), [])
    response = next((ids for k in RESPONSE_KEYS if (ids := _ints(a.get(k))) is not None), [])
    body = _body(a.get("voltbus.llm.response"))
    response_id = next((v for k in RESPONSE_ID_KEYS if isinstance(v := a.get(k), str) and v), None)
    call_id = a.get(CALL_ID_KEY)
    return Sampled(
        prompt_ids=prompt,
        response_ids=response,
        logprobs=_span_logprobs(a, len(response)) if response else None,
        resources_id=_version(body),
        model=body.get("model") or a.get("voltbus.llm.model") or None,
        response_id=response_id or (body.get("id") if isinstance(body.get("id"), str) else None),
        call_id=call_id if isinstance(call_id, str) and call_id else None,
        failed=span.status_code == "ERROR" or "exception.type" in a,
    )


def from_call(row: CallRow) -> Sampled:
    """What the gateway recorded for a call."""
    body = _body(row.response)
    response = list(row.response_ids or [])
    return Sampled(
        prompt_ids=list(row.prompt_ids or []),
        response_ids=response,
        logprobs=_floats(row.logprobs, len(response)) if response else None,
        resources_id=row.resources_id,
        model=row.model,
        response_id=body.get("id") if isinstance(body.get("id"), str) else None,
        call_id=row.call_id,
        failed=row.status == "error",
    )


def merged(gateway: Sampled, span: Sampled) -> Sampled:
    """One call seen both ways: the gateway's tokens (what the engine sampled) unless it has none."""
    if gateway.response_ids or not span.response_ids:
        return msgspec.structs.replace(gateway, model=gateway.model or span.model)
    return msgspec.structs.replace(
        span, call_id=gateway.call_id, resources_id=gateway.resources_id or span.resources_id
    )
