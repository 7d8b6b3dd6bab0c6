"""APO's critic: an OpenAI-compatible chat model (or two: AL's gradient and apply-edit models) that writes a
textual gradient (a critique of a prompt template given its rollouts) and then applies it (an edited template).
The prompts are ``critique.md`` and ``edit.md`` next to this module. A failed call (an HTTP error, a timeout, an
empty reply) is counted and yields None; it never raises.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

import httpx
import openai
from openai import AsyncOpenAI

from voltbus.schemas.resources import LLM

from .search import Example, render_examples, unfence

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
CRITIQUE_PROMPT = Template((_HERE / "critique.md").read_text())
EDIT_PROMPT = Template((_HERE / "edit.md").read_text())


class Critic:
    """Critique with ``llm``'s model, then edit with ``edit_model`` (default: the same model) on the same endpoint;
    ``errors`` counts failed calls by kind. ``options``: more ``AsyncOpenAI`` arguments (``default_headers``,
    ``default_query``: those of a client the user gave, e.g. an Azure api-version)."""

    def __init__(
        self,
        llm: LLM,
        temperature: float = 1.0,
        max_retries: int = 2,
        timeout_s: float = 120.0,
        edit_model: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.llm = llm
        self.edit_model = edit_model or llm.model
        self.params: dict[str, Any] = {"temperature": temperature, **llm.sampling_parameters}
        self.http = httpx.AsyncClient(timeout=timeout_s)
        self.client = AsyncOpenAI(
            base_url=llm.endpoint,
            api_key=llm.api_key or "none",
            max_retries=max_retries,
            http_client=self.http,
            **(options or {}),
        )
        self.errors: Counter[str] = Counter()

    async def close(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()

    async def critique(self, template: str, examples: Sequence[Example]) -> str | None:
        """The textual gradient of ``template`` given its rollouts, or None when the call failed."""
        prompt = CRITIQUE_PROMPT.substitute(template=template, examples=render_examples(examples))
        return await self._ask(prompt, "critique", self.llm.model)

    async def edit(self, template: str, critique: str) -> str | None:
        """``template`` rewritten to follow ``critique``, or None when the call failed."""
        reply = await self._ask(EDIT_PROMPT.substitute(template=template, critique=critique), "edit", self.edit_model)
        if reply is None:
            return None
        return unfence(reply) or self._failed("edit_empty", "only an empty code fence")

    async def _ask(self, prompt: str, what: str, model: str) -> str | None:
        try:
            reply = await self.client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": prompt}], **self.params
            )
        except openai.APIStatusError as exc:
            return self._failed(f"{what}_http_{exc.status_code}", exc)
        except (openai.APIError, httpx.HTTPError, ValueError) as exc:  # connection, timeout, unreadable reply
            return self._failed(f"{what}_{type(exc).__name__}", exc)
        try:
            text = reply.choices[0].message.content
        except (AttributeError, IndexError, TypeError):  # a 200 whose body is not a chat completion
            return self._failed(f"{what}_malformed", f"not a chat completion: {reply!r:.200}")
        if not text or not text.strip():
            return self._failed(f"{what}_empty", "empty reply")
        return text

    def _failed(self, kind: str, why: object) -> None:
        self.errors[kind] += 1
        log.warning("APO critic call failed (%s): %s", kind, why)
        return None
