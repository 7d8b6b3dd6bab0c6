"""Reading OpenAI request bodies into prompts and sampling parameters, with clear refusals.

Both APIs take ``model``, ``n``, ``max_tokens``, ``temperature`` (0: greedy), ``top_p``, ``stop``,
``seed``, ``stream`` (+ ``stream_options.include_usage``) and vLLM's ``return_token_ids`` and ``ignore_eos``.
Completions: ``prompt`` (a string, a list of token ids, or a list of either) and ``logprobs: int``.
Chat: ``messages``, ``max_completion_tokens``, ``logprobs: true`` and ``top_logprobs: int``.
Other fields are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from voltbus.services.settings import InferenceSettings

from .errors import RequestError
from .sampling import Sampling

Kind = Literal["chat", "completions"]


@dataclass(frozen=True)
class Parsed:
    """A request, ready for the batcher: token ids per prompt and the sampling of each sample."""

    kind: Kind
    model: str
    prompts: list[list[int]]
    n: int
    sampling: Sampling
    logprobs: int | None
    """None: no logprobs in the answer; k: the sampled token's logprob and k alternatives."""
    return_token_ids: bool
    stream: bool
    include_usage: bool


def number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise RequestError(f"{name} must be a number in [{low}, {high}], got {value!r}", param=name)
    return float(value)


def integer(body: dict[str, Any], name: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError(f"{name} must be an integer in [{low}, {high}], got {value!r}", param=name)
    return value


def stop_strings(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops) or len(stops) > 16:
        raise RequestError("stop must be a string or a list of at most 16 strings", param="stop")
    return tuple(s for s in stops if s)


def chat_text(message: Any) -> dict[str, str]:
    """A message as ``{"role", "content"}`` text (content parts of type text are joined)."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise RequestError("each message must be an object with a role", param="messages")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    if content is not None and not isinstance(content, str):
        raise RequestError("message content must be a string or a list of text parts", param="messages")
    return {"role": message["role"], "content": content or ""}


def logprobs_of(body: dict[str, Any], kind: Kind, cfg: InferenceSettings) -> int | None:
    if kind == "completions":
        return integer(body, "logprobs", None, 0, cfg.max_logprobs)
    wanted = body.get("logprobs")
    if wanted not in (None, True, False):
        raise RequestError("logprobs must be true or false", param="logprobs")
    top = integer(body, "top_logprobs", 0, 0, cfg.max_logprobs)
    if top and not wanted:
        raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
    return top if wanted else None


def sampling_of(body: dict[str, Any], kind: Kind, room: int, cfg: InferenceSettings) -> Sampling:
    """The sampling parameters; ``room`` is what the longest prompt leaves of the context."""
    name = "max_completion_tokens" if kind == "chat" and body.get("max_completion_tokens") is not None else "max_tokens"
    asked = integer(body, name, None, 1, 1 << 30)
    if asked is not None and asked > room:
        raise RequestError(
            f"this model's maximum context length is {cfg.max_model_len} tokens; the prompt leaves room for {room}, "
            f"but {name} is {asked}",
            param=name,
        )
    seed = integer(body, "seed", None, -(1 << 63), (1 << 63) - 1)
    return Sampling(
        max_tokens=asked or min(cfg.default_max_tokens, room),
        temperature=number(body, "temperature", 1.0, 0.0, 100.0),
        top_p=number(body, "top_p", 1.0, 1e-9, 1.0),
        stop=stop_strings(body),
        seed=seed,
        top_logprobs=logprobs_of(body, kind, cfg) or 0,
        ignore_eos=body.get("ignore_eos") is True,
    )


def completion_prompts(body: dict[str, Any], tok: Any) -> list[list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise RequestError(
            "prompt must be a string, a list of token ids, or a non-empty list of either", param="prompt"
        )
    out = []
    for one in prompt:
        if isinstance(one, str):
            out.append(tok(one).input_ids)
        elif isinstance(one, list) and one and all(isinstance(t, int) and 0 <= t < len(tok) for t in one):
            out.append(list(one))
        else:
            raise RequestError(f"prompt token ids must be a non-empty list of ids in [0, {len(tok)})", param="prompt")
    return out


def chat_prompt(body: dict[str, Any], tok: Any) -> list[list[int]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    text = tok.apply_chat_template([chat_text(m) for m in messages], tokenize=False, add_generation_prompt=True)
    return [tok(text, add_special_tokens=False).input_ids]


def parse(body: Any, kind: Kind, tok: Any, model_name: str, cfg: InferenceSettings) -> Parsed:
    """Check a request body and tokenize its prompts (run it off the event loop)."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model", model_name)
    if model != model_name:
        raise RequestError(
            f"the model {model!r} does not exist; this server serves {model_name!r}", 404, "NotFoundError", "model"
        )
    if kind == "completions" and body.get("echo"):
        raise RequestError("echo is not supported", param="echo")
    prompts = completion_prompts(body, tok) if kind == "completions" else chat_prompt(body, tok)
    assert cfg.max_model_len is not None
    room = cfg.max_model_len - max(len(p) for p in prompts)
    if room < 1:
        raise RequestError(
            f"this model's maximum context length is {cfg.max_model_len} tokens; the prompt has "
            f"{max(len(p) for p in prompts)}, which leaves no room to generate",
            param="messages" if kind == "chat" else "prompt",
        )
    options = body.get("stream_options")
    return Parsed(
        kind=kind,
        model=model_name,
        prompts=prompts,
        n=integer(body, "n", 1, 1, cfg.max_n) or 1,
        sampling=sampling_of(body, kind, room, cfg),
        logprobs=logprobs_of(body, kind, cfg),
        return_token_ids=body.get("return_token_ids") is True,
        stream=body.get("stream") is True,
        include_usage=isinstance(options, dict) and options.get("include_usage") is True,
    )
