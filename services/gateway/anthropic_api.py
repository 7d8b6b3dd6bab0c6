"""The Anthropic Messages API (``POST /v1/messages``) as chat completions: pure translation both ways.

Taken: ``model``, ``max_tokens``, ``system`` (text or text blocks), ``messages`` with content
blocks ``text``, ``tool_use`` and ``tool_result``, ``tools`` (``input_schema``), ``tool_choice``,
``stop_sequences``, ``temperature``, ``top_p``, ``top_k``, ``stream``. Refused with 400 in
Anthropic's error shape: images, documents, thinking, server tools, MCP servers, containers.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from .client_api import (
    Answer,
    Block,
    ClientApi,
    StreamFolder,
    bad,
    error_fields,
    folded,
    kept_headers,
    shown,
    sse,
    text_content,
)

ACCEPTED = frozenset({"model", "max_tokens", "messages", "system", "tools", "tool_choice", "stream"})
MAPPED = {"stop_sequences": "stop", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}
IGNORED = frozenset(
    {"metadata", "service_tier", "cache_control", "inference_geo", "speed", "user_profile_id", "workspace_id"}
    | {"diagnostics"}
)
"""Bookkeeping and placement fields with no effect on what is sampled (prompt caching is the engine's)."""
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion body for a Messages request; 400 for what it cannot take.

    >>> to_chat({"model": "m", "max_tokens": 8, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'model': 'm', 'max_tokens': 8,
     'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'hi'}]}
    """
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        raise bad("thinking is not supported by this gateway", "thinking")
    unknown = sorted(set(body) - ACCEPTED - set(MAPPED) - IGNORED - {"thinking", "output_config"})
    if unknown:
        raise bad(f"unsupported parameter(s): {', '.join(shown(k) for k in unknown[:8])}", unknown[0][:64])
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise bad("max_tokens: a positive integer is required", "max_tokens")
    if not isinstance(body.get("messages"), list):
        raise bad("messages: a list is required", "messages")
    system = body.get("system")
    messages = [{"role": "system", "content": _system(system)}] if system else []
    for n, message in enumerate(body["messages"]):
        messages += chat_messages(message, n)
    chat: dict[str, Any] = {"model": body.get("model"), "max_tokens": max_tokens, "messages": messages}
    if body.get("tools"):
        if not isinstance(body["tools"], list):
            raise bad("tools must be a list", "tools")
        chat["tools"] = [chat_tool(t, n) for n, t in enumerate(body["tools"])]
    if body.get("tool_choice") is not None:
        chat.update(chat_tool_choice(body["tool_choice"]))
    chat.update({MAPPED[k]: v for k, v in body.items() if k in MAPPED and v is not None})
    chat.update(output_format(body.get("output_config")))
    if messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
        chat.update(add_generation_prompt=False, continue_final_message=True)  # a prefill (vLLM's names)
    if body.get("stream"):
        chat.update(stream=True, stream_options={"include_usage": True})
    return chat


def output_format(config: Any) -> dict[str, Any]:
    """Chat's ``response_format`` for ``output_config.format`` (a JSON schema); 400 for ``effort``.

    >>> output_format({"format": {"type": "json_schema", "schema": {"type": "object"}}})
    {'response_format': {'type': 'json_schema', 'json_schema': {'name': 'output', 'schema': {'type': 'object'}}}}
    """
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise bad("output_config must be an object", "output_config")
    if config.get("effort") is not None:
        raise bad("output_config.effort is not supported by this gateway", "output_config.effort")
    fmt = config.get("format")
    if fmt is None:
        return {}
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad("output_config.format must be a json_schema with a schema", "output_config.format")
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}}


def _system(system: Any) -> str | list[dict[str, str]]:
    if isinstance(system, str):
        return system
    return text_content(_texts(system, "system", ("text",)))


def _texts(blocks: Any, param: str, allowed: tuple[str, ...]) -> list[str]:
    if not isinstance(blocks, list):
        raise bad(f"{param} must be a string or a list of content blocks", param)
    texts = []
    for n, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in allowed or not isinstance(block.get("text"), str):
            raise bad(f"{param}[{n}]: content of type {shown(kind)} is not supported here (text only)", f"{param}[{n}]")
        texts.append(block["text"])
    return texts


def chat_messages(message: Any, n: int) -> list[dict[str, Any]]:
    """The chat messages for one Anthropic message: a user message's tool results become ``tool``
    messages (first, in order), its text one user message; an assistant's tool uses become tool calls."""
    role = message.get("role") if isinstance(message, dict) else None
    if role not in ("user", "assistant"):
        raise bad(f"messages[{n}].role must be user or assistant", f"messages[{n}].role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad(f"messages[{n}].content must be a string or a list of content blocks", f"messages[{n}].content")
    texts, tools, calls = [], [], []
    for m, block in enumerate(content):
        where = f"messages[{n}].content[{m}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_result" and role == "user":
            tools.append(_tool_result(block, where))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_call(block, where))
        else:
            raise bad(f"{where}: content of type {shown(kind)} is not supported in a {role} message", where)
    if role == "assistant":
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        return [reply | ({"tool_calls": calls} if calls else {})]
    return tools + ([{"role": "user", "content": text_content(texts)}] if texts else [])


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("tool_use_id"), str):
        raise bad(f"{where}.tool_use_id must be a string", f"{where}.tool_use_id")
    content = block.get("content", "")
    text = content if isinstance(content, str) else text_content(_texts(content, f"{where}.content", ("text",)) or [""])
    if block.get("is_error") and isinstance(text, str):
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise bad(f"{where}: a tool_use block needs a string id and name", where)
    try:
        arguments = json.dumps(block.get("input", {}))
    except RecursionError:
        raise bad(f"{where}.input is nested too deeply", f"{where}.input") from None
    return {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}


def chat_tool(tool: Any, n: int) -> dict[str, Any]:
    """A chat tool for an Anthropic client tool; 400 for server tools (web search, bash, ...)."""
    if not isinstance(tool, dict) or tool.get("type", "custom") != "custom" or not isinstance(tool.get("name"), str):
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise bad(
            f"tools[{n}]: tools of type {shown(kind)} are not supported (client tools with a name only)", f"tools[{n}]"
        )
    fn = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
    if tool.get("description"):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def chat_tool_choice(choice: Any) -> dict[str, Any]:
    """Chat's ``tool_choice`` (and ``parallel_tool_calls``) for an Anthropic one.

    >>> chat_tool_choice({"type": "any", "disable_parallel_tool_use": True})
    {'tool_choice': 'required', 'parallel_tool_calls': False}
    >>> chat_tool_choice({"type": "tool", "name": "add"})
    {'tool_choice': {'type': 'function', 'function': {'name': 'add'}}}
    """
    kind = choice.get("type") if isinstance(choice, dict) else None
    simple = {"auto": "auto", "any": "required", "none": "none"}
    if kind in simple:
        out: dict[str, Any] = {"tool_choice": simple[kind]}
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise bad(f"tool_choice {shown(choice)} is not supported (auto, any, none or tool)", "tool_choice")
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def stop(request: dict[str, Any], answer: Answer) -> tuple[str | None, str | None]:
    """(``stop_reason``, ``stop_sequence``) of an answer: a stop sequence when the engine names one
    of the request's (vLLM's ``stop_reason``), ``tool_use`` when it called tools."""
    if any(b.kind == "tool" for b in answer.blocks):
        return "tool_use", None
    sequences = request.get("stop_sequences") or []
    if answer.finish_reason == "stop" and isinstance(answer.stop_reason, str) and answer.stop_reason in sequences:
        return "stop_sequence", answer.stop_reason
    return STOP_REASONS.get(answer.finish_reason or "stop", "end_turn"), None


def content_block(block: Block) -> dict[str, Any]:
    """The content block of an answer block; a tool call whose arguments are not a JSON object keeps
    them as the raw string in ``input``."""
    if block.kind == "text":
        return {"type": "text", "text": block.text}
    try:
        tool_input = json.loads(block.text) if block.text.strip() else {}
    except ValueError:
        tool_input = block.text
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": tool_input}


def message(request: dict[str, Any], answer: Answer, call_id: str, final: bool = True) -> dict[str, Any]:
    """The Messages answer (``final=False``: the empty one ``message_start`` carries)."""
    reason, sequence = stop(request, answer) if final else (None, None)
    return {
        "id": f"msg_{call_id}",
        "type": "message",
        "role": "assistant",
        "model": answer.model or str(request.get("model") or ""),
        "content": [content_block(b) for b in answer.blocks] if final else [],
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens if final else 0},
    }


def answer(request: dict[str, Any], chat: Any, call_id: str) -> dict[str, Any]:
    """The Messages answer for the engine's (non-streamed) chat answer."""
    return message(request, folded(chat, call_id), call_id)


class MessagesStream(StreamFolder):
    """Chat chunks as Messages stream events (``message_start`` ... ``message_stop``)."""

    def __init__(self, request: dict[str, Any], call_id: str) -> None:
        super().__init__(call_id)
        self.request = request

    def on_start(self) -> bytes:
        return sse(
            "message_start",
            {"type": "message_start", "message": message(self.request, self.answer, self.call_id, False)},
        )

    def on_open(self, block: Block) -> bytes:
        start = {"type": "text", "text": ""} if block.kind == "text" else {**content_block(block), "input": {}}
        return sse("content_block_start", {"type": "content_block_start", "index": block.index, "content_block": start})

    def _delta(self, block: Block, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"type": "content_block_delta", "index": block.index, "delta": delta})

    def on_text(self, block: Block, piece: str) -> bytes:
        return self._delta(block, {"type": "text_delta", "text": piece})

    def on_arguments(self, block: Block, piece: str) -> bytes:
        return self._delta(block, {"type": "input_json_delta", "partial_json": piece})

    def on_close(self, block: Block) -> bytes:
        return sse("content_block_stop", {"type": "content_block_stop", "index": block.index})

    def on_end(self) -> bytes:
        reason, sequence = stop(self.request, self.answer)
        usage = {"input_tokens": self.answer.input_tokens, "output_tokens": self.answer.output_tokens}
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage}
        return sse("message_delta", delta) + sse("message_stop", {"type": "message_stop"})

    def on_error(self, message: str) -> bytes:
        return sse("error", {"type": "error", "error": {"type": "api_error", "message": message}})


def error(answer: Response) -> Response:
    """An error answer in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``),
    with the gateway's own kind kept as ``error.code``; status and headers (``Retry-After``) kept."""
    kind, text = error_fields(answer)
    status = answer.status_code
    mapped = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": mapped, "message": text, "code": kind}}
    return JSONResponse(body, status_code=status, headers=kept_headers(answer))


MESSAGES = ClientApi("messages", to_chat, answer, MessagesStream, error)
"""The Anthropic Messages API."""
