"""What the client APIs other than OpenAI chat (Responses, Anthropic Messages) share: pure helpers.

Each such API is translated to a chat completion for the engine (``ClientApi.to_chat``), and the
engine's chat answer back to the client's shape: a whole answer (``answer``), or a stream, whose
chat chunks a ``StreamFolder`` folds into blocks (text, tool calls), emitting the client's SSE events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from starlette.responses import Response

from .errors import GatewayError


def bad(message: str, param: str | None = None) -> GatewayError:
    """The 400 for a request the translation cannot take (``invalid_request_error``)."""
    return GatewayError(400, "invalid_request_error", message, param=param)


def shown(value: Any) -> str:
    """A value as echoed in a refusal: its repr, cut to 64 characters.

    >>> shown("web_search"), shown("x" * 100)[-20:]
    ("'web_search'", '... (102 characters)')
    """
    text = repr(value)
    return text if len(text) <= 64 else f"{text[:64]}... ({len(text)} characters)"


def sse(event: str, data: dict[str, Any]) -> bytes:
    """One server-sent event with a name and a JSON payload.

    >>> sse("ping", {"type": "ping"})
    b'event: ping\\ndata: {"type":"ping"}\\n\\n'
    """
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def text_content(texts: list[str]) -> str | list[dict[str, str]]:
    """Chat message content for text pieces: one piece as a string, several as text parts.

    >>> text_content(["a"]), text_content(["a", "b"])
    ('a', [{'type': 'text', 'text': 'a'}, {'type': 'text', 'text': 'b'}])
    """
    return texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]


@dataclass
class Block:
    """One piece of an answer: a text, or a tool call (``text`` is then its JSON arguments)."""

    kind: Literal["text", "tool"]
    id: str = ""
    name: str = ""
    text: str = ""
    index: int = 0
    """Its position among the answer's blocks (an output item's or content block's index)."""


@dataclass
class Answer:
    """A chat answer folded into blocks, with why it ended and what it cost."""

    model: str = ""
    blocks: list[Block] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: Any = None
    """vLLM's ``stop_reason``: the stop string (or token id) that ended the answer."""
    input_tokens: int = 0
    output_tokens: int = 0


def _count(usage: Any, key: str, fallback: int) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else fallback


def folded(chat: Any, call_id: str) -> Answer:
    """A non-streamed chat completion as an ``Answer`` (its first choice).

    >>> a = folded({"model": "m", "prompt_token_ids": [1, 2], "choices": [{"finish_reason": "tool_calls",
    ...     "token_ids": [5], "message": {"content": "hi", "tool_calls": [{"id": "c", "function":
    ...     {"name": "add", "arguments": "{}"}}]}}]}, "x")
    >>> [(b.kind, b.text) for b in a.blocks], a.finish_reason, a.input_tokens, a.output_tokens
    ([('text', 'hi'), ('tool', '{}')], 'tool_calls', 2, 1)
    """
    body = chat if isinstance(chat, dict) else {}
    choices = body.get("choices") if isinstance(body.get("choices"), list) else []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    blocks = [Block("text", text=message["content"])] if isinstance(message.get("content"), str) else []
    blocks = [b for b in blocks if b.text]
    for n, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") if isinstance(tc, dict) and isinstance(tc.get("function"), dict) else {}
        ident = tc.get("id") if isinstance(tc, dict) and isinstance(tc.get("id"), str) else f"call_{call_id}_{n}"
        blocks.append(Block("tool", id=ident, name=str(fn.get("name") or ""), text=str(fn.get("arguments") or "")))
    for n, block in enumerate(blocks):
        block.index = n
    prompt_ids = body.get("prompt_token_ids") or choice.get("prompt_token_ids")
    token_ids = choice.get("token_ids")
    usage = body.get("usage")
    return Answer(
        model=str(body.get("model") or ""),
        blocks=blocks,
        finish_reason=choice.get("finish_reason") if isinstance(choice.get("finish_reason"), str) else None,
        stop_reason=choice.get("stop_reason"),
        input_tokens=_count(usage, "prompt_tokens", len(prompt_ids) if isinstance(prompt_ids, list) else 0),
        output_tokens=_count(usage, "completion_tokens", len(token_ids) if isinstance(token_ids, list) else 0),
    )


class StreamFolder:
    """Folds chat chunks (``chunk``) into an ``Answer`` as they arrive, returning the client's SSE
    bytes for each; subclasses say what each step looks like in their API (the ``on_*`` hooks)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self.answer = Answer()
        self.current: Block | None = None
        self.tools: dict[int, Block] = {}
        self.started = False
        self.failed = False

    def chunk(self, chunk: dict[str, Any]) -> bytes:
        """The client's events for one chat chunk (empty when it adds nothing they show)."""
        if self.failed:
            return b""
        if chunk.get("error") is not None:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            return self.fail(f"engine sent an error: {message or error}")
        out = [] if self.started else [self._start(chunk)]
        usage = chunk.get("usage")
        self.answer.input_tokens = _count(usage, "prompt_tokens", self.answer.input_tokens)
        self.answer.output_tokens = _count(usage, "completion_tokens", self.answer.output_tokens)
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                out.append(self._choice(choice, usage))
        return b"".join(out)

    def _start(self, chunk: dict[str, Any]) -> bytes:
        self.started = True
        self.answer.model = str(chunk.get("model") or "")
        prompt_ids = chunk.get("prompt_token_ids")
        if isinstance(prompt_ids, list):
            self.answer.input_tokens = len(prompt_ids)
        return self.on_start()

    def _choice(self, choice: dict[str, Any], usage: Any) -> bytes:
        out = []
        if isinstance(choice.get("token_ids"), list) and not isinstance(usage, dict):
            self.answer.output_tokens += len(choice["token_ids"])
        delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self.current is None or self.current.kind != "text":
                out.append(self._open(Block("text")))
            assert self.current is not None
            self.current.text += content
            out.append(self.on_text(self.current, content))
        for n, tc in enumerate(delta.get("tool_calls") or []):
            out.append(self._tool_delta(tc if isinstance(tc, dict) else {}, n))
        if isinstance(choice.get("finish_reason"), str):
            self.answer.finish_reason = choice["finish_reason"]
            self.answer.stop_reason = choice.get("stop_reason")
        return b"".join(out)

    def _tool_delta(self, delta: dict[str, Any], position: int) -> bytes:
        out = []
        index = delta.get("index") if isinstance(delta.get("index"), int) else position
        fn = delta.get("function") if isinstance(delta.get("function"), dict) else {}
        block = self.tools.get(index)
        if block is None:
            ident = delta.get("id") if isinstance(delta.get("id"), str) else f"call_{self.call_id}_{index}"
            block = self.tools[index] = Block("tool", id=ident, name=str(fn.get("name") or ""))
            out.append(self._open(block))
        arguments = fn.get("arguments")
        if isinstance(arguments, str) and arguments:
            block.text += arguments
            out.append(self.on_arguments(block, arguments))
        return b"".join(out)

    def _open(self, block: Block) -> bytes:
        closed = self.on_close(self.current) if self.current is not None else b""
        block.index = len(self.answer.blocks)
        self.answer.blocks.append(block)
        self.current = block
        return closed + self.on_open(block)

    def end(self) -> bytes:
        """The client's closing events, once the engine's stream ended (none after a failure)."""
        if self.failed:
            return b""
        out = [b"" if self.started else self.on_start()]
        if self.current is not None:
            out.append(self.on_close(self.current))
            self.current = None
        out.append(self.on_end())
        return b"".join(out)

    def fail(self, message: str) -> bytes:
        """The client's error event: the stream broke or the engine sent an error; nothing follows."""
        self.failed = True
        return self.on_error(message)

    def on_start(self) -> bytes:
        """Events opening the answer."""
        raise NotImplementedError

    def on_open(self, block: Block) -> bytes:
        """Events opening a block."""
        raise NotImplementedError

    def on_text(self, block: Block, piece: str) -> bytes:
        """Events for a piece of text."""
        raise NotImplementedError

    def on_arguments(self, block: Block, piece: str) -> bytes:
        """Events for a piece of a tool call's arguments."""
        raise NotImplementedError

    def on_close(self, block: Block) -> bytes:
        """Events closing a block."""
        raise NotImplementedError

    def on_end(self) -> bytes:
        """Events closing the answer."""
        raise NotImplementedError

    def on_error(self, message: str) -> bytes:
        """The error event."""
        raise NotImplementedError


@dataclass(frozen=True)
class ClientApi:
    """One client API: its translation to chat and back, its stream, and its error shape."""

    name: str
    to_chat: Callable[[dict[str, Any]], dict[str, Any]]
    """The chat body for a request (raises a 400 ``GatewayError`` for what it cannot take)."""
    answer: Callable[[dict[str, Any], Any, str], dict[str, Any]]
    """(request, engine's chat answer, call id) -> the client's answer."""
    stream: Callable[[dict[str, Any], str], StreamFolder]
    """(request, call id) -> the folder that turns chat chunks into the client's events."""
    error: Callable[[Response], Response]
    """An error answer (OpenAI's shape) in the client's shape, status and headers kept."""


def error_fields(response: Response) -> tuple[str, str]:
    """(kind, message) of an error answer: the gateway's own shape, an engine's, or its text.

    >>> error_fields(Response(b'{"error": {"type": "gateway_paused", "message": "paused"}}', 429))
    ('gateway_paused', 'paused')
    >>> error_fields(Response(b'{"object": "error", "message": "too long", "type": "BadRequestError"}', 400))
    ('BadRequestError', 'too long')
    """
    try:
        body = json.loads(bytes(response.body))
    except ValueError:
        return "error", bytes(response.body).decode(errors="replace")[:500]
    inner = body.get("error") if isinstance(body, dict) and isinstance(body.get("error"), dict) else body
    if not isinstance(inner, dict):
        return "error", str(inner)[:500]
    return str(inner.get("type") or "error"), str(inner.get("message") or inner)


def kept_headers(response: Response) -> dict[str, str]:
    """An answer's headers worth keeping on its translation (``Retry-After``, ``X-Agl-Paused``, ...)."""
    return {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
