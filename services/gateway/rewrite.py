"""Pure request rewriting and response reading: what the gateway forces, and what it records.

The engine is asked for the token ids and logprobs it sampled (vLLM's ``return_token_ids`` and
``logprobs``); nothing else in the body is touched, and the names of the changed fields are kept.
Token ids are read where vLLM puts them: ``prompt_token_ids`` at the top level (chat) or on the
choice (completions), ``choices[i].token_ids``, and logprobs from ``logprobs.content[*].logprob``
(chat) or ``logprobs.token_logprobs`` (completions). The version that sampled a call is the
engine's top-level ``resources_id`` or ``weight_version`` (the CPU inference server), else the one
version named by vLLM's per-choice ``weight_versions`` spans; spans naming several versions, or
vLLM's unset label ``default`` (weights nobody labelled: a restarted vLLM serves its base model),
make it unknown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from voltbus.schemas import SampledChoice

Kind = Literal["chat", "completions"]
"""Which OpenAI API a call uses."""


def rewrite_body(
    body: dict[str, Any], kind: Kind, *, model: str | None = None, temperature: float | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The body to forward and the names of the fields set or changed (a shallow copy; input untouched).

    ``model`` and ``temperature``, when given, replace the agent's (the served model name, and the
    temperature of the call's mode); every other field passes through.

    >>> rewrite_body({"model": "m", "logprobs": True}, "chat")
    ({'model': 'm', 'logprobs': True, 'return_token_ids': True}, ['return_token_ids'])
    >>> rewrite_body({"model": "m", "logprobs": 2}, "completions")[1]
    ['return_token_ids']
    >>> rewrite_body({"model": "m"}, "completions")
    ({'model': 'm', 'logprobs': 0, 'return_token_ids': True}, ['logprobs', 'return_token_ids'])
    >>> rewrite_body({"model": "auto", "temperature": 0.1, "n": 2}, "chat", model="tiny", temperature=1.0)[1]
    ['model', 'temperature', 'logprobs', 'return_token_ids']
    """
    out = dict(body)
    changed: list[str] = []
    for key, value in (("model", model), ("temperature", temperature)):
        if value is not None and out.get(key) != value:
            out[key] = value
            changed.append(key)
    if kind == "chat":
        if out.get("logprobs") is not True:
            out["logprobs"] = True
            changed.append("logprobs")
    elif not isinstance(out.get("logprobs"), int) or isinstance(out.get("logprobs"), bool):
        out["logprobs"] = 0  # completions: 0 still returns the sampled token's logprob
        changed.append("logprobs")
    if out.get("return_token_ids") is not True:
        out["return_token_ids"] = True
        changed.append("return_token_ids")
    return out, changed


def _ints(value: Any) -> list[int]:
    return [int(t) for t in value] if isinstance(value, list) else []


def choice_logprobs(choice: dict[str, Any]) -> list[float]:
    """Sampled-token logprobs of one choice (chat or completions schema); [] when absent.

    >>> choice_logprobs({"logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.0}]}})
    [-0.5, -1.0]
    >>> choice_logprobs({"logprobs": {"token_logprobs": [-0.25]}}), choice_logprobs({})
    ([-0.25], [])
    """
    lp = choice.get("logprobs") or {}
    if not isinstance(lp, dict):
        return []
    content = lp.get("content")
    if isinstance(content, list):
        return [float(c["logprob"]) for c in content if isinstance(c, dict) and "logprob" in c]
    tokens = lp.get("token_logprobs")
    return [float(x) for x in tokens if x is not None] if isinstance(tokens, list) else []


@dataclass(frozen=True)
class Sampled:
    """What a response says was sampled: the first choice, and every choice when there are several
    (the full response is recorded as well)."""

    model: str | None = None
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    resources_id: str | None = None
    choices: list[SampledChoice] = field(default_factory=list)
    version_unknown: bool = False
    """vLLM's ``weight_versions`` rule out any one known version: they name several, or the unset label."""


UNSET_VERSION = "default"
"""The label a vLLM engine reports before anyone set one (``/update_weight_version``)."""


def span_versions(choices: list[dict[str, Any]]) -> set[str]:
    """The versions named by vLLM's per-choice ``weight_versions`` spans (``return_weight_versions``),
    vLLM's unset label included.

    >>> span_versions([{"weight_versions": [{"version": "r:3", "start": 0, "end": 2}]}, {"token_ids": [1]}])
    {'r:3'}
    >>> sorted(span_versions([{"weight_versions": [{"version": "r:3", "start": 0, "end": 1},
    ...     {"version": "r:4", "start": 1, "end": 2}]}]))
    ['r:3', 'r:4']
    >>> span_versions([{"weight_versions": [{"version": "default", "start": 0, "end": 2}]}])
    {'default'}
    """
    found: set[str] = set()
    for choice in choices:
        spans = choice.get("weight_versions")
        for span in spans if isinstance(spans, list) else []:
            if isinstance(span, dict) and span.get("version") is not None:
                found.add(str(span["version"]))
    return found


def read_response(body: Any) -> Sampled:
    """Token ids, logprobs, usage and finish reason of an OpenAI response (vLLM fields).

    >>> s = read_response({"model": "m", "prompt_token_ids": [1, 2], "usage": {"total_tokens": 3},
    ...     "choices": [{"token_ids": [7], "finish_reason": "stop", "logprobs": {"content": [{"logprob": -0.5}]}}]})
    >>> s.prompt_ids, s.response_ids, s.logprobs, s.finish_reason, s.usage
    ([1, 2], [7], [-0.5], 'stop', {'total_tokens': 3})
    """
    if not isinstance(body, dict):
        return Sampled()
    raw = body.get("choices")
    listed = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    choice = listed[0] if listed else {}
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    resources = body.get("resources_id", body.get("weight_version"))
    spans = span_versions(listed) if resources is None else set()
    if len(spans) == 1 and UNSET_VERSION not in spans:
        resources = spans.pop()
    return Sampled(
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        prompt_ids=_ints(body.get("prompt_token_ids") or choice.get("prompt_token_ids")),
        response_ids=_ints(choice.get("token_ids")),
        logprobs=choice_logprobs(choice),
        usage={k: int(v) for k, v in (usage or {}).items() if isinstance(v, int) and not isinstance(v, bool)},
        finish_reason=choice.get("finish_reason"),
        resources_id=str(resources) if resources is not None else None,
        choices=[_sampled_choice(c, i) for i, c in enumerate(listed)] if len(listed) > 1 else [],
        version_unknown=bool(spans) and resources is None,
    )


def _sampled_choice(choice: dict[str, Any], position: int) -> SampledChoice:
    index = choice.get("index")
    reason = choice.get("finish_reason")
    return SampledChoice(
        index=index if isinstance(index, int) and index >= 0 else position,
        response_ids=_ints(choice.get("token_ids")),
        logprobs=choice_logprobs(choice),
        finish_reason=reason if isinstance(reason, str) else None,
    )
