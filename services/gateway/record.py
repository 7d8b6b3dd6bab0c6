"""One ``ModelCalled`` event per call: what was sent, what came back, and what it cost."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import msgspec

from voltbus.schemas import ErrorInfo, ModelCalled, Usage, derive_id

from .rewrite import Kind, read_response

if TYPE_CHECKING:
    from .client_api import ClientApi


@dataclass
class Call:
    """A call being served: its attribution, the body forwarded, and its clocks."""

    rollout_id: str
    attempt_id: str
    kind: Kind
    request: dict[str, Any]
    rewritten: list[str]
    upstream: str
    streamed: bool = False
    mode: str | None = None
    epoch: int = -1
    """The served-versions epoch when the call was admitted (``versions``); -1: not admitted."""
    client: ClientApi | None = None
    """The client's API when it is not OpenAI chat or completions (Responses, Anthropic Messages):
    the call is forwarded as chat and answered in that API's shape."""
    client_request: dict[str, Any] = field(default_factory=dict)
    """The client's own request body, for ``client`` (its answer echoes parts of it)."""
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    at: float = field(default_factory=time.time)
    started: float = field(default_factory=time.monotonic)

    @property
    def path(self) -> str:
        """The engine path of this API."""
        return "chat/completions" if self.kind == "chat" else "completions"

    @cached_property
    def body(self) -> bytes:
        """The forwarded body as JSON, encoded once: sent to the engine (on every try) and recorded."""
        return msgspec.json.encode(self.request)


def _raw(value: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value))


def model_called(
    call: Call,
    response: Any,
    *,
    http_status: int | None,
    retries: int = 0,
    error: tuple[str, str] | None = None,
    raw: bytes | None = None,
    served: str | None = None,
) -> ModelCalled:
    """The event for ``call``; ``error`` is (type, message) for a failed call, which sets ``status``.

    ``raw`` is the engine's body as received, when it is the JSON text of ``response``: recorded as
    is instead of encoding ``response`` again. The resources version is the one the engine reports
    on the response (``read_response``), else ``served``: what the weight-swap protocol says the
    engine served (``Gateway.served_version``); None when neither knows, or when vLLM's spans rule
    out any one known version (several, or its unset label ``default``)."""
    sampled = read_response(response)
    usage = sampled.usage
    if not usage and (sampled.prompt_ids or sampled.response_ids):
        p, c = len(sampled.prompt_ids), len(sampled.response_ids)
        usage = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    keys = ("prompt_tokens", "completion_tokens", "total_tokens")
    return ModelCalled(
        event_id=derive_id(call.rollout_id, "call", call.call_id),
        rollout_id=call.rollout_id,
        attempt_id=call.attempt_id,
        call_id=call.call_id,
        resources_id=sampled.resources_id or (None if sampled.version_unknown else served),
        model=sampled.model or str(call.request.get("model") or ""),
        request=msgspec.Raw(call.body),
        response=msgspec.Raw(raw) if raw is not None else _raw(response),
        prompt_ids=sampled.prompt_ids,
        response_ids=sampled.response_ids,
        logprobs=sampled.logprobs,
        latency_s=max(0.0, time.monotonic() - call.started),
        usage=Usage(**{k: max(0, usage[k]) for k in keys if k in usage}),
        status="error" if error else "ok",
        error=ErrorInfo(type=error[0], message=error[1]) if error else None,
        at=call.at,
        finish_reason=sampled.finish_reason if isinstance(sampled.finish_reason, str) else None,
        http_status=http_status,
        upstream=call.upstream,
        retries=retries,
        rewritten=call.rewritten,
        streamed=call.streamed,
        choices=sampled.choices,
        mode=call.mode,
    )
