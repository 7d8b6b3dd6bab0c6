"""``get_langchain_handler``: Agent Lightning's way for a LangChain or LangGraph agent to trace its runs.

A mixin of the runner's tracer: the handler records into the tracer's OpenTelemetry tracer (see
``langchain_handler``). ``langchain-core`` is imported only here, when a handler is asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import trace

MISSING = (
    "get_langchain_handler() needs langchain-core, which is not installed: "
    "pip install langchain-core (it comes with langchain, langchain-openai and langgraph)"
)


class LangchainTracing:
    """Gives a tracer with an OpenTelemetry tracer (``self.otel``) Agent Lightning's LangChain handler."""

    otel: trace.Tracer

    def get_langchain_handler(self, tags: Sequence[str] | None = None) -> Any:
        """A LangChain callback handler (``BaseCallbackHandler``) recording chains, tools and model calls as spans
        of the current attempt, with ``agent.name`` on LangGraph nodes; pass it as ``{"callbacks": [handler]}``."""
        try:
            from .langchain_handler import LangchainHandler
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] == "langchain_core":
                raise ImportError(MISSING) from exc
            raise
        return LangchainHandler(self.otel, tags)

    get_langchain_callback_handler = get_langchain_handler
    """Agent Lightning's other name for it."""
