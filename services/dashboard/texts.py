"""What a model call said, as text: the prompt and the response read from its recorded request and response.

Chat calls give one line per message (``role: content``), completions calls their prompt and choice text; a
body with no text (token ids only, or not JSON) gives None, and the page says so.
"""

from __future__ import annotations

import json
from typing import Any

MAX_CHARS = 20_000
"""Longest text the page gets per prompt or response; past it the text is cut and says how much was left out."""


def _load(body: object) -> Any:
    if isinstance(body, str):
        try:
            return json.loads(body)
        except ValueError:
            return None
    return body


def _content(content: object) -> str:
    """A message's content as text: a string as it is, a list of parts as their text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def _cut(text: str) -> str:
    """``text``, cut at ``MAX_CHARS`` with a note of what was left out.

    >>> _cut("x" * (MAX_CHARS + 5))[-31:]
    '… (5 more characters not shown)'
    """
    if len(text) <= MAX_CHARS:
        return text
    return f"{text[:MAX_CHARS]}… ({len(text) - MAX_CHARS} more characters not shown)"


def prompt_text(request: object) -> str | None:
    """The prompt of a recorded request as text, or None when it has none.

    >>> prompt_text('{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]}')
    'system: Be brief.\\nuser: 2+2?'
    >>> prompt_text({"prompt": "2+2="}), prompt_text('{"prompt": [1, 2]}'), prompt_text("not json")
    ('2+2=', None, None)
    """
    body = _load(request)
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list):
        lines = [f"{m.get('role', '?')}: {_content(m.get('content'))}" for m in body["messages"] if isinstance(m, dict)]
        return _cut("\n".join(lines))
    prompt = body.get("prompt")
    return _cut(prompt) if isinstance(prompt, str) else None


def response_text(response: object) -> str | None:
    """The first choice of a recorded response as text (a chat message's content and tool calls, or a
    completion's text), or None when it has none.

    >>> response_text('{"choices": [{"message": {"role": "assistant", "content": "4"}}]}')
    '4'
    >>> response_text({"choices": [{"text": " 4"}]}), response_text('{"error": "x"}')
    (' 4', None)
    """
    body = _load(response)
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if isinstance(choice.get("message"), dict):
        message = choice["message"]
        parts = [_content(message.get("content"))] if message.get("content") is not None else []
        parts += [f"[tool call] {json.dumps(call)}" for call in message.get("tool_calls") or []]
        return _cut("\n".join(parts)) if parts else None
    return _cut(choice["text"]) if isinstance(choice.get("text"), str) else None
