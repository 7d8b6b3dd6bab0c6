"""Assembling a streamed (SSE) call from its chunks, as they pass through to the agent: no I/O here;
``streaming.py`` serves the stream and records the call this assembles.

The bytes are forwarded untouched; a copy is split into ``data:`` lines and folded into one
response in the non-streamed shape (content or text, token ids, logprobs, finish reason, usage per
choice), so the recorded call looks the same whether or not it was streamed. Tool-call deltas are
merged by their ``index`` into whole tool calls (id, type, function name, concatenated arguments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec

from .rewrite import Kind, choice_logprobs


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    prompt_ids: list[int] = field(default_factory=list)
    weight_versions: list[Any] | None = None


def merge_tool_calls(calls: dict[int, dict[str, Any]], deltas: Any) -> None:
    """Fold streamed tool-call deltas into whole calls keyed by index (arguments arrive in pieces).

    >>> calls = {}
    >>> merge_tool_calls(calls, [{"index": 0, "id": "c1", "type": "function",
    ...     "function": {"name": "add", "arguments": '{"a": '}}])
    >>> merge_tool_calls(calls, [{"index": 0, "function": {"arguments": "1}"}}])
    >>> calls[0]
    {'id': 'c1', 'type': 'function', 'function': {'name': 'add', 'arguments': '{"a": 1}'}}
    """
    for delta in deltas if isinstance(deltas, list) else []:
        if not isinstance(delta, dict):
            continue
        index = delta.get("index") if isinstance(delta.get("index"), int) else len(calls)
        call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        for key in ("id", "type"):
            if delta.get(key):
                call[key] = delta[key]
        function = delta.get("function") if isinstance(delta.get("function"), dict) else {}
        if function.get("name"):
            call["function"]["name"] += function["name"]
        if isinstance(function.get("arguments"), str):
            call["function"]["arguments"] += function["arguments"]


class StreamAssembler:
    """Feed it the raw bytes of an SSE response; ``response()`` is the assembled body.

    >>> a = StreamAssembler("chat")
    >>> a.feed(b'data: {"model": "m", "prompt_token_ids": [1], "choices": [{"index": 0, "delta": {"content": "4"}, ')
    []
    >>> chunks = a.feed(b'"token_ids": [7], "logprobs": {"content": [{"logprob": -0.5}]}}]}\\n\\ndata: [DONE]\\n\\n')
    >>> [c["model"] for c in chunks]  # the chunks the bytes completed
    ['m']
    >>> r = a.response(); r["choices"][0]["message"]["content"], r["choices"][0]["token_ids"], a.done
    ('4', [7], True)
    """

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.buffer = b""
        self.done = False
        self.meta: dict[str, Any] = {}
        self.choices: dict[int, _Choice] = {}
        self.error: Any = None

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Take the next bytes of the stream (any split); complete lines are folded in, and the
        chunks they held are returned (for a client API that answers in its own events)."""
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [chunk for line in lines if (chunk := self._line(line.strip())) is not None]

    def _line(self, line: bytes) -> dict[str, Any] | None:
        if not line.startswith(b"data:"):
            return None
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return None
        try:
            chunk = msgspec.json.decode(payload)
        except msgspec.DecodeError:  # not strict JSON: what the stdlib reads (NaN), else skipped
            try:
                chunk = json.loads(payload)
            except ValueError:
                return None
        if not isinstance(chunk, dict):
            return None
        self._chunk(chunk)
        return chunk

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            self.error = chunk["error"]
        for key in ("id", "model", "created", "prompt_token_ids", "usage", "resources_id", "weight_version"):
            if chunk.get(key) is not None:
                self.meta[key] = chunk[key]
        for raw in chunk.get("choices") or []:
            if not isinstance(raw, dict):
                continue
            choice = self.choices.setdefault(int(raw.get("index", 0)), _Choice())
            delta = raw.get("delta") if self.kind == "chat" else raw
            text = (delta or {}).get("content" if self.kind == "chat" else "text")
            if isinstance(text, str):
                choice.text.append(text)
            if self.kind == "chat" and (delta or {}).get("tool_calls"):
                merge_tool_calls(choice.tool_calls, delta["tool_calls"])
            if isinstance(raw.get("token_ids"), list):
                choice.token_ids.extend(int(t) for t in raw["token_ids"])
            if isinstance(raw.get("prompt_token_ids"), list):
                choice.prompt_ids = [int(t) for t in raw["prompt_token_ids"]]
            choice.logprobs.extend(choice_logprobs(raw))
            if raw.get("finish_reason") is not None:
                choice.finish_reason = raw["finish_reason"]
            if isinstance(raw.get("weight_versions"), list):  # vLLM: on the choice's last chunk
                choice.weight_versions = raw["weight_versions"]

    def response(self) -> dict[str, Any]:
        """The call as one non-streamed response body."""
        choices = []
        for index, c in sorted(self.choices.items()):
            out: dict[str, Any] = {"index": index, "finish_reason": c.finish_reason, "token_ids": c.token_ids}
            if c.weight_versions is not None:
                out["weight_versions"] = c.weight_versions
            if self.kind == "chat":
                out["message"] = {"role": "assistant", "content": "".join(c.text)}
                if c.tool_calls:
                    out["message"]["tool_calls"] = [c.tool_calls[i] for i in sorted(c.tool_calls)]
                out["logprobs"] = {"content": [{"logprob": x} for x in c.logprobs]}
            else:
                out["text"] = "".join(c.text)
                out["logprobs"] = {"token_logprobs": c.logprobs}
                if c.prompt_ids:
                    out["prompt_token_ids"] = c.prompt_ids
            choices.append(out)
        body = {**self.meta, "object": "chat.completion" if self.kind == "chat" else "text_completion"}
        body["choices"] = choices
        if self.error is not None:
            body["error"] = self.error
        return body
