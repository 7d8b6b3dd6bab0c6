"""The OpenAI Responses API (``POST /v1/responses``) as chat completions: pure translation both ways.

Taken: ``input`` (a string, or items: messages with text parts, ``function_call``,
``function_call_output``), ``instructions``, function ``tools``, ``tool_choice``,
``parallel_tool_calls``, ``max_output_tokens``, ``temperature``, ``top_p``, ``text.format``
(text, json_object, json_schema), ``stream``. Refused with 400: server-side state
(``previous_response_id``, ``conversation``, ``background``, ``prompt``), built-in tools, images,
files, reasoning; what is only bookkeeping (``store``, ``metadata``, ``include``, ...) is accepted.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.responses import Response

from .client_api import Answer, Block, ClientApi, StreamFolder, bad, folded, shown, sse, text_content

ACCEPTED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "stream"})
MAPPED = {"max_output_tokens": "max_tokens", "temperature": "temperature", "top_p": "top_p"}
IGNORED = frozenset(
    {"store", "metadata", "include", "user", "service_tier", "truncation", "safety_identifier", "prompt_cache_key"}
)
"""Bookkeeping fields with no effect on sampling (nothing is stored: see docs/gateway.md)."""
PASSED = frozenset(
    {"top_logprobs", "seed", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"}
)
"""Sampling fields passed to the engine as they are (vLLM's extras included)."""
STATEFUL = ("previous_response_id", "conversation", "background", "prompt")
TEXT_PARTS = ("input_text", "output_text", "text")
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion body for a Responses request; 400 for what it cannot take.

    >>> to_chat({"model": "m", "input": "2+2", "instructions": "Be brief.", "max_output_tokens": 8})
    ... # doctest: +NORMALIZE_WHITESPACE
    {'model': 'm', 'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': '2+2'}],
     'max_tokens': 8}
    """
    for key in STATEFUL:
        if body.get(key) not in (None, False):
            raise bad(f"{key} is not supported by this gateway: it keeps no server-side state", key)
    if body.get("reasoning") not in (None, {}):
        raise bad("reasoning options are not supported by this gateway", "reasoning")
    unknown = sorted(set(body) - ACCEPTED - set(MAPPED) - IGNORED - PASSED - {"text", "reasoning", *STATEFUL})
    if unknown:
        raise bad(f"unsupported parameter(s): {', '.join(shown(k) for k in unknown[:8])}", unknown[0][:64])
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        raise bad("instructions must be a string", "instructions")
    messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
    messages += input_messages(body.get("input"))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    if body.get("tools"):
        chat["tools"] = [chat_tool(t, n) for n, t in enumerate(_list(body["tools"], "tools"))]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = chat_tool_choice(body["tool_choice"])
    if body.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    chat.update({MAPPED[k]: v for k, v in body.items() if k in MAPPED and v is not None})
    chat.update({k: v for k, v in body.items() if k in PASSED and v is not None})
    if (fmt := response_format(body.get("text"))) is not None:
        chat["response_format"] = fmt
    if body.get("stream"):
        chat.update(stream=True, stream_options={"include_usage": True})
    return chat


def _list(value: Any, param: str) -> list[Any]:
    if not isinstance(value, list):
        raise bad(f"{param} must be a list", param)
    return value


def input_messages(value: Any) -> list[dict[str, Any]]:
    """Chat messages for ``input``: a string is one user message; items are translated in order."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    messages: list[dict[str, Any]] = []
    for n, item in enumerate(_list(value, "input")):
        if not isinstance(item, dict):
            raise bad(f"input[{n}] must be an object", f"input[{n}]")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, n))
        elif kind == "function_call":
            _function_call(messages, item, n)
        elif kind == "function_call_output":
            output = item.get("output")
            content = output if isinstance(output, str) else text_content(_texts(output, f"input[{n}].output"))
            messages.append({"role": "tool", "tool_call_id": _str(item, "call_id", n), "content": content})
        else:
            raise bad(f"input[{n}]: items of type {shown(kind)} are not supported by this gateway", f"input[{n}].type")
    return messages


def _str(item: dict[str, Any], key: str, n: int) -> str:
    if not isinstance(item.get(key), str):
        raise bad(f"input[{n}].{key} must be a string", f"input[{n}].{key}")
    return item[key]


def _message(item: dict[str, Any], n: int) -> dict[str, Any]:
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise bad(f"input[{n}].role must be one of {', '.join(ROLES)}", f"input[{n}].role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    return {"role": role, "content": text_content(_texts(content, f"input[{n}].content"))}


def _texts(parts: Any, param: str) -> list[str]:
    texts = []
    for m, part in enumerate(_list(parts, param)):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise bad(f"{param}[{m}]: content of type {shown(kind)} is not supported (text only)", f"{param}[{m}]")
    return texts


def _function_call(messages: list[dict[str, Any]], item: dict[str, Any], n: int) -> None:
    """Add a function call to the assistant message just before, or to a new one."""
    call = {
        "id": _str(item, "call_id", n),
        "type": "function",
        "function": {"name": _str(item, "name", n), "arguments": _str(item, "arguments", n)},
    }
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def chat_tool(tool: Any, n: int) -> dict[str, Any]:
    """A chat tool for a Responses function tool; 400 for built-in tools (web search, files, ...)."""
    kind = tool.get("type") if isinstance(tool, dict) else None
    if kind != "function":
        raise bad(
            f"tools[{n}]: tools of type {shown(kind)} are not supported (function tools only)", f"tools[{n}].type"
        )
    if not isinstance(tool.get("name"), str):
        raise bad(f"tools[{n}].name must be a string", f"tools[{n}].name")
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": fn}


def chat_tool_choice(choice: Any) -> Any:
    """Chat's ``tool_choice`` for a Responses one.

    >>> chat_tool_choice("required"), chat_tool_choice({"type": "function", "name": "add"})
    ('required', {'type': 'function', 'function': {'name': 'add'}})
    """
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad(f"tool_choice {shown(choice)} is not supported (auto, none, required or a function)", "tool_choice")


def response_format(text: Any) -> dict[str, Any] | None:
    """Chat's ``response_format`` for ``text.format`` (None for plain text)."""
    fmt = text.get("format") if isinstance(text, dict) else None
    if text is not None and not isinstance(text, dict):
        raise bad("text must be an object", "text")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if fmt is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise bad(f"text.format of type {shown(kind)} is not supported", "text.format")


def output_item(block: Block, call_id: str, status: str = "completed") -> dict[str, Any]:
    """The output item of one answer block: a ``message`` or a ``function_call``."""
    if block.kind == "text":
        part = {"type": "output_text", "text": block.text, "annotations": [], "logprobs": []}
        ident = f"msg_{call_id}_{block.index}"
        return {"type": "message", "id": ident, "status": status, "role": "assistant", "content": [part]}
    ident = f"fc_{call_id}_{block.index}"
    return {
        "type": "function_call",
        "id": ident,
        "call_id": block.id,
        "name": block.name,
        "arguments": block.text,
        "status": status,
    }


def response(request: dict[str, Any], answer: Answer, call_id: str, status: str = "completed") -> dict[str, Any]:
    """The Responses object for an answer (``status`` ``in_progress`` while a stream starts)."""
    done = status != "in_progress"
    incomplete = done and answer.finish_reason == "length"
    usage = {
        "input_tokens": answer.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": answer.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": answer.input_tokens + answer.output_tokens,
    }
    return {
        "id": f"resp_{call_id}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": answer.model or str(request.get("model") or ""),
        "output": [output_item(b, call_id) for b in answer.blocks] if done else [],
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature"),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "metadata": request.get("metadata") or {},
        "store": False,
        "usage": usage if done else None,
    }


def answer(request: dict[str, Any], chat: Any, call_id: str) -> dict[str, Any]:
    """The Responses object for the engine's (non-streamed) chat answer."""
    return response(request, folded(chat, call_id), call_id)


class ResponsesStream(StreamFolder):
    """Chat chunks as Responses stream events (``response.created`` ... ``response.completed``)."""

    def __init__(self, request: dict[str, Any], call_id: str) -> None:
        super().__init__(call_id)
        self.request = request
        self.sequence = 0

    def event(self, kind: str, **data: Any) -> bytes:
        """One numbered event."""
        self.sequence += 1
        return sse(kind, {"type": kind, "sequence_number": self.sequence - 1, **data})

    def on_start(self) -> bytes:
        snapshot = response(self.request, self.answer, self.call_id, "in_progress")
        return self.event("response.created", response=snapshot) + self.event("response.in_progress", response=snapshot)

    def _where(self, block: Block) -> dict[str, Any]:
        return {"item_id": output_item(block, self.call_id)["id"], "output_index": block.index}

    def on_open(self, block: Block) -> bytes:
        item = output_item(block, self.call_id, "in_progress")
        if block.kind == "text":
            item["content"] = []
        out = self.event("response.output_item.added", output_index=block.index, item=item)
        if block.kind == "text":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out += self.event("response.content_part.added", **self._where(block), content_index=0, part=part)
        return out

    def on_text(self, block: Block, piece: str) -> bytes:
        where = self._where(block)
        return self.event("response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[])

    def on_arguments(self, block: Block, piece: str) -> bytes:
        return self.event("response.function_call_arguments.delta", **self._where(block), delta=piece)

    def on_close(self, block: Block) -> bytes:
        item = output_item(block, self.call_id)
        where = self._where(block)
        if block.kind == "text":
            out = self.event("response.output_text.done", **where, content_index=0, text=block.text, logprobs=[])
            out += self.event("response.content_part.done", **where, content_index=0, part=item["content"][0])
        else:
            args = {"arguments": block.text, "name": block.name}
            out = self.event("response.function_call_arguments.done", **where, **args)
        return out + self.event("response.output_item.done", output_index=block.index, item=item)

    def on_end(self) -> bytes:
        final = response(self.request, self.answer, self.call_id)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return self.event(kind, response=final)

    def on_error(self, message: str) -> bytes:
        error = {"type": "upstream_error", "message": message}  # an ``error`` object: the openai client raises
        return self.event("error", code="upstream_error", message=message, param=None, error=error)


def error(answer: Response) -> Response:
    """Errors are already in OpenAI's shape."""
    return answer


RESPONSES = ClientApi("responses", to_chat, answer, ResponsesStream, error)
"""The Responses API."""
