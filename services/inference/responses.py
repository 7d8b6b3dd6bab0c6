"""Response bodies and stream chunks in the OpenAI shapes, with vLLM's token-id fields.

* ``return_token_ids``: completions choices carry ``prompt_token_ids`` and ``token_ids``; chat
  responses carry ``prompt_token_ids`` at the top level and ``token_ids`` on each choice. Streamed,
  the prompt ids come once (chat: the first chunk; completions: each choice's first chunk) and each
  chunk carries the ``token_ids`` it adds.
* logprobs (raw, temperature 1): completions ``{tokens, token_logprobs, top_logprobs, text_offset}``;
  chat ``{"content": [{token, logprob, bytes, top_logprobs}]}``.
* ``weight_version`` on every body and chunk: the version of the weights that sampled every token.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from transformers.convert_slow_tokenizer import bytes_to_unicode

from .engine import Piece, Row
from .protocol import Parsed

BYTE_OF = {char: byte for byte, char in bytes_to_unicode().items()}
"""Byte-level BPE's printable stand-in for each byte (``Ġ`` for a space), back to the byte."""


class TokenText:
    """The text of single tokens, cached (special tokens spelled out, as vLLM shows them), and their bytes."""

    def __init__(self, tok: Any) -> None:
        self.tok, self.cache = tok, {}
        backend = getattr(tok, "backend_tokenizer", None)
        self.byte_level = type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"

    def __call__(self, token_id: int) -> str:
        if token_id not in self.cache:
            self.cache[token_id] = self.tok.decode([token_id], skip_special_tokens=False)
        return self.cache[token_id]

    def bytes(self, token_id: int) -> list[int]:
        """The token's UTF-8 bytes; for a byte-level BPE token that is part of a character (its text has
        ``\ufffd``), the bytes it stands for, so a client can join the character (as vLLM and OpenAI do)."""
        piece = self.tok.convert_ids_to_tokens(token_id) if self.byte_level else None
        if isinstance(piece, str) and all(c in BYTE_OF for c in piece):
            return [BYTE_OF[c] for c in piece]
        return list(self(token_id).encode())


@dataclass
class Answer:
    """What every body and chunk of one request shares."""

    parsed: Parsed
    version: str
    text: TokenText
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        prefix = "chatcmpl" if self.parsed.kind == "chat" else "cmpl"
        self.id = self.id or f"{prefix}-{uuid.uuid4().hex}"

    def head(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.parsed.model}

    def prompt_of(self, index: int) -> list[int]:
        return self.parsed.prompts[index // self.parsed.n]

    def usage(self, rows: list[Row]) -> dict[str, int]:
        prompt = sum(len(p) for p in self.parsed.prompts)
        completion = sum(len(r.token_ids) for r in rows)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    # -- logprobs

    def completion_logprobs(self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]], at: int):
        tokens = [self.text(t) for t in ids]
        offsets = []
        for token in tokens:
            offsets.append(at)
            at += len(token)
        top = [{self.text(i): v for i, v in alts} | {tok: lp} for alts, tok, lp in zip(tops, tokens, lps, strict=True)]
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": top, "text_offset": offsets}

    def chat_logprobs(self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]]):
        def entry(token_id: int, lp: float) -> dict[str, Any]:
            token = self.text(token_id)
            return {"token": token, "logprob": lp, "bytes": self.text.bytes(token_id)}

        content = [
            entry(t, lp) | {"top_logprobs": [entry(i, v) for i, v in alts]}
            for t, lp, alts in zip(ids, lps, tops, strict=True)
        ]
        return {"content": content}

    # -- whole responses

    def body(self, rows: list[Row]) -> dict[str, Any]:
        chat = self.parsed.kind == "chat"
        out = self.head("chat.completion" if chat else "text_completion")
        out["choices"] = [self.chat_choice(i, r) if chat else self.completion_choice(i, r) for i, r in enumerate(rows)]
        if chat and self.parsed.return_token_ids:
            out["prompt_token_ids"] = self.parsed.prompts[0]
        out["usage"] = self.usage(rows)
        out["weight_version"] = self.version
        return out

    def completion_choice(self, index: int, row: Row) -> dict[str, Any]:
        logprobs = None
        if self.parsed.logprobs is not None:
            logprobs = self.completion_logprobs(row.token_ids, row.logprobs, row.top, 0)
        choice = {"index": index, "text": row.text, "logprobs": logprobs, "finish_reason": row.finish_reason}
        if self.parsed.return_token_ids:
            choice |= {"prompt_token_ids": self.prompt_of(index), "token_ids": row.token_ids}
        return choice

    def chat_choice(self, index: int, row: Row) -> dict[str, Any]:
        logprobs = None
        if self.parsed.logprobs is not None:
            logprobs = self.chat_logprobs(row.token_ids, row.logprobs, row.top)
        message = {"role": "assistant", "content": row.text}
        choice = {"index": index, "message": message, "logprobs": logprobs, "finish_reason": row.finish_reason}
        if self.parsed.return_token_ids:
            choice["token_ids"] = row.token_ids
        return choice

    # -- stream chunks

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.parsed.kind == "chat" else "text_completion"
        return self.head(obj) | {"choices": choices} | extra | {"weight_version": self.version}

    def first_chunk(self, count: int) -> dict[str, Any] | None:
        """Chat only: the assistant role for every choice, and the prompt's token ids."""
        if self.parsed.kind != "chat":
            return None
        delta = {"role": "assistant", "content": ""}
        choices = [{"index": i, "delta": delta, "logprobs": None, "finish_reason": None} for i in range(count)]
        extra = {"prompt_token_ids": self.parsed.prompts[0]} if self.parsed.return_token_ids else {}
        return self.chunk(choices, **extra)

    def piece_chunk(self, index: int, piece: Piece, first: bool, offset: int) -> dict[str, Any]:
        """One row's step: its text delta, token id, logprob and (at the end) finish reason."""
        ids = [piece.token_id] if piece.token_id is not None else []
        lps, tops = ([piece.logprob], [piece.top]) if ids else ([], [])
        choice: dict[str, Any] = {"index": index}
        logprobs = None
        if self.parsed.kind == "chat":
            choice["delta"] = {"content": piece.text} if piece.text or not piece.finish_reason else {}
            if self.parsed.logprobs is not None:
                logprobs = self.chat_logprobs(ids, lps, tops)
        else:
            choice["text"] = piece.text
            if self.parsed.logprobs is not None:
                logprobs = self.completion_logprobs(ids, lps, tops, offset)
        choice |= {"logprobs": logprobs, "finish_reason": piece.finish_reason}
        if self.parsed.return_token_ids:
            choice["token_ids"] = ids
            if first and self.parsed.kind == "completions":
                choice["prompt_token_ids"] = self.prompt_of(index)
        return self.chunk([choice])
