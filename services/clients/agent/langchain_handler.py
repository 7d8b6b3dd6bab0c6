"""A LangChain callback handler that records chains, tools, retrievers and model calls as spans of the attempt.

Each LangChain run becomes a span ``langchain.<kind>.<name>``, child of its parent run's span, and is the
current OpenTelemetry span while it runs, so a model call recorded inside it (the runner's OpenAI capture)
nests under it. A LangGraph node's span carries ``agent.name`` (the node's name): ``agent_match`` selects
nodes. Needs ``langchain-core`` (this module imports it; ``LogTracer.get_langchain_handler`` says so).
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

PREFIX = "langchain"
"""Span names are ``langchain.<kind>.<run name>``; attributes ``langchain.*``."""
MAX_TEXT = 4000
"""Inputs and outputs are kept as JSON text, cut to this many characters."""


def _text(value: Any) -> str:
    """JSON text of a run's inputs or outputs (messages and other objects by ``str``), cut to ``MAX_TEXT``.

    >>> _text({"question": "q", "n": 1})
    '{"question": "q", "n": 1}'
    """
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return text[:MAX_TEXT]


def node_name(name: str | None, metadata: dict[str, Any] | None) -> str | None:
    """The LangGraph node a run is, or None: LangGraph names a node's run after the node and puts the node in
    the metadata of every run below it, so only the run whose name is the node is the node itself.

    >>> node_name("write_query", {"langgraph_node": "write_query"}), node_name("ChatOpenAI", {"langgraph_node": "w"})
    ('write_query', None)
    """
    node = (metadata or {}).get("langgraph_node")
    return node if isinstance(node, str) and node and node == name else None


class LangchainHandler(BaseCallbackHandler):
    """Records LangChain runs as OpenTelemetry spans of ``otel_tracer`` (the runner tracer's)."""

    run_inline = True
    """Called in the run's own context (not a copy in a worker thread), so the span it makes current is
    current for the run's body too."""

    def __init__(self, otel_tracer: trace.Tracer, tags: Sequence[str] | None = None) -> None:
        super().__init__()
        self.otel = otel_tracer
        self.tags = list(tags or [])
        self.spans: dict[UUID, tuple[Span, object]] = {}
        """run id -> its open span and the token that made it current."""
        self.lock = threading.Lock()

    def _start(self, kind: str, name: str, run_id: UUID, parent_run_id: UUID | None, **attributes: Any) -> None:
        with self.lock:
            parent = self.spans.get(parent_run_id) if parent_run_id is not None else None
        ctx = trace.set_span_in_context(parent[0]) if parent is not None else None
        attrs = {f"{PREFIX}.run_kind": kind, f"{PREFIX}.run_id": str(run_id), **attributes}
        if parent_run_id is not None:
            attrs[f"{PREFIX}.parent_run_id"] = str(parent_run_id)
        if self.tags:
            attrs[f"{PREFIX}.tags"] = self.tags
        span = self.otel.start_span(f"{PREFIX}.{kind}.{name}", context=ctx, attributes=attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        with self.lock:
            self.spans[run_id] = (span, token)

    def _end(self, run_id: UUID, error: BaseException | None = None, **attributes: Any) -> None:
        with self.lock:
            opened = self.spans.pop(run_id, None)
        if opened is None:
            return  # a run this handler never saw start (it was added midway): nothing to end
        span, token = opened
        _detach(token)
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if error is not None:
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:500]))
        span.end()

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A chain (a LangGraph graph or node, a runnable sequence) starts."""
        name = _run_name(serialized, kwargs)
        extra = {f"{PREFIX}.chain.name": name, f"{PREFIX}.inputs": _text(inputs)}
        if node := node_name(name, metadata):
            extra |= {"agent.name": node, "langgraph.node": node}
            if isinstance(step := (metadata or {}).get("langgraph_step"), int):
                extra["langgraph.step"] = step
        self._start("chain", name, run_id, parent_run_id, **extra)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain ends."""
        self._end(run_id, **{f"{PREFIX}.outputs": _text(outputs)})

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A chain fails (LangGraph's control flow exceptions included, as LangChain reports them)."""
        self._end(run_id, error)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A chat model call starts (the model call itself is recorded by the runner's capture, inside)."""
        prompt = [[{"role": getattr(m, "type", ""), "content": getattr(m, "content", str(m))} for m in batch]
                  for batch in messages]  # fmt: skip
        self._start("llm", _run_name(serialized, kwargs), run_id, parent_run_id, **{f"{PREFIX}.inputs": _text(prompt)})

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A text model call starts."""
        self._start("llm", _run_name(serialized, kwargs), run_id, parent_run_id, **{f"{PREFIX}.inputs": _text(prompts)})

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call ends: its generations and the response id (the ``id`` the engine gave) are kept."""
        generations = [[getattr(g, "text", "") for g in batch] for batch in getattr(response, "generations", [])]
        output = getattr(response, "llm_output", None) or {}
        response_id = output.get("id") if isinstance(output, dict) else None
        self._end(run_id, **{f"{PREFIX}.outputs": _text(generations), "gen_ai.response.id": response_id})

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A model call fails."""
        self._end(run_id, error)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool starts."""
        name = _run_name(serialized, kwargs)
        extra = {f"{PREFIX}.tool.name": name, f"{PREFIX}.inputs": _text(kwargs.get("inputs") or input_str)}
        self._start("tool", name, run_id, parent_run_id, **extra)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool ends."""
        self._end(run_id, **{f"{PREFIX}.outputs": _text(getattr(output, "content", output))})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool fails."""
        self._end(run_id, error)

    def on_retriever_start(
        self,
        serialized: dict[str, Any] | None,
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """A retriever starts."""
        self._start("retriever", _run_name(serialized, kwargs), run_id, parent_run_id, **{f"{PREFIX}.inputs": query})

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever ends."""
        texts = [getattr(d, "page_content", str(d)) for d in documents]
        self._end(run_id, **{f"{PREFIX}.outputs": _text(texts)})

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A retriever fails."""
        self._end(run_id, error)


def _run_name(serialized: dict[str, Any] | None, kwargs: dict[str, Any]) -> str:
    """The run's name: LangChain's ``name`` keyword (a LangGraph node's name), else the serialized one's."""
    name = kwargs.get("name") or (serialized or {}).get("name")
    if not name and (ids := (serialized or {}).get("id")):
        name = ids[-1] if isinstance(ids, list) else ids
    return str(name or "unnamed")


def _detach(token: object) -> None:
    """Undo the ``attach`` of a run's start. A run that ends in another context than it started in (LangChain
    ran the start callback in a copy) has nothing attached here: the token is dropped without a warning."""
    if isinstance(token, contextvars.Token):  # OpenTelemetry's default runtime context is a ContextVar
        try:
            token.var.reset(token)
        except (ValueError, RuntimeError):
            pass
    else:  # another runtime context: its own detach (which logs a failure)
        otel_context.detach(token)  # type: ignore[arg-type]
