"""Agent Lightning's ``adapter.messages``: spans to OpenAI chat examples (``{"messages": [...], "tools": ...}``),
one per recorded chat call, built as ``voltbus export-training`` builds its lines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from .base import Adapter

__all__ = ["OpenAIMessages", "TraceToMessages"]


class OpenAIMessages(TypedDict):
    """One chat example: the request's messages with the reply appended, and the request's tools (or None)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None


class TraceToMessages(Adapter[Sequence[Any], list[OpenAIMessages]]):
    """Spans to OpenAI chat examples: each recorded chat call's request messages plus the reply, with its tools."""

    def adapt(self, source: Sequence[Any], /) -> list[OpenAIMessages]:
        """One ``{"messages": [...], "tools": [...] or None}`` per recorded chat call with text or tool calls."""
        from voltbus.services.ops.training_export import example  # the export's reader of a recorded call (DuckDB)

        examples: list[OpenAIMessages] = []
        for span in sorted(source, key=lambda s: s.sequence_id):
            attributes = span.attributes or {}
            line = example(attributes.get("voltbus.llm.request"), attributes.get("voltbus.llm.response"))
            if line is not None and "messages" in line:
                examples.append({"messages": line["messages"], "tools": line.get("tools")})
        return examples
