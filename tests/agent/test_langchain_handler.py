"""``get_langchain_handler``: a LangGraph graph's nodes, model runs and tools become spans of the attempt, each
under its parent run, and the model call the runner's OpenAI capture records nests under the node that made it
(invoked and awaited alike; LangChain's real libraries, a scripted engine at the edge)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypedDict

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import ReadableSpan

from tests.examples.scripted_engine import scripted_app
from tests.services.gateway.stub_llm import serve
from voltbus.services.clients.agent.instrument import instrument_openai, uninstrument_openai
from voltbus.services.clients.agent.otel import LogTracer


class State(TypedDict, total=False):
    question: str
    query: str
    verdict: str


def reply(body: dict[str, Any]) -> dict[str, Any]:
    system = body["messages"][0]["content"]
    return {"role": "assistant", "content": "SELECT 1" if system == "write" else "THE QUERY IS CORRECT."}


@tool
def run_sql(query: str) -> str:
    """Run a query."""
    return f"ran {query}"


def graph(llm: ChatOpenAI) -> Any:
    def write_query(state: State) -> State:
        answer = llm.invoke([("system", "write"), ("user", state["question"])])
        return {"query": str(answer.content)}

    def check_query(state: State) -> State:
        run_sql.invoke({"query": state["query"]})
        return {"verdict": str(llm.invoke([("system", "check"), ("user", state["query"])]).content)}

    async def awrite_query(state: State) -> State:
        answer = await llm.ainvoke([("system", "write"), ("user", state["question"])])
        return {"query": str(answer.content)}

    async def acheck_query(state: State) -> State:
        await run_sql.ainvoke({"query": state["query"]})
        return {"verdict": str((await llm.ainvoke([("system", "check"), ("user", state["query"])])).content)}

    builder = StateGraph(State)
    builder.add_node("write_query", write_query, afunc=awrite_query)  # type: ignore[call-overload]
    builder.add_node("check_query", check_query, afunc=acheck_query)  # type: ignore[call-overload]
    builder.add_edge(START, "write_query")
    builder.add_edge("write_query", "check_query")
    builder.add_edge("check_query", END)
    return builder.compile()


@pytest.fixture
def tracer() -> Iterator[LogTracer]:
    made = LogTracer(store=None)
    instrument_openai(made)
    yield made
    uninstrument_openai()
    made.shutdown()


@pytest.fixture
async def llm() -> AsyncIterator[ChatOpenAI]:
    async with serve(scripted_app(reply, [])) as url:
        yield ChatOpenAI(model="m", base_url=f"{url}/v1", api_key="k", max_retries=0)  # type: ignore[arg-type]


def spans_of(tracer: LogTracer) -> list[ReadableSpan]:
    tracer._drain()
    return [span for _, span in tracer.pending.get("ro-1", [])]


def ancestors(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> list[str]:
    names = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        names.append(span.name)
    return names


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_a_graphs_runs_are_spans_and_each_model_call_nests_under_its_node(
    tracer: LogTracer, llm: ChatOpenAI, mode: str
) -> None:
    agent = graph(llm)
    handler = tracer.get_langchain_handler()
    config = {"callbacks": [handler]}
    with tracer.attempt("ro-1", "at-1"):
        if mode == "invoke":  # a sync agent, as the runner runs one: in a worker thread with the attempt's context
            result = await asyncio.to_thread(agent.invoke, {"question": "how many?"}, config)
        else:
            result = await agent.ainvoke({"question": "how many?"}, config)
    assert result["verdict"] == "THE QUERY IS CORRECT."
    spans = spans_of(tracer)
    by_id = {s.context.span_id: s for s in spans}  # type: ignore[union-attr]
    names = sorted(s.name for s in spans)
    assert names.count("openai.chat.completions.create") == 2
    assert {"langchain.chain.LangGraph", "langchain.chain.write_query", "langchain.chain.check_query",
            "langchain.llm.ChatOpenAI", "langchain.tool.run_sql"} <= set(names)  # fmt: skip
    nodes = {s.attributes["agent.name"]: s for s in spans if "agent.name" in (s.attributes or {})}
    assert sorted(nodes) == ["check_query", "write_query"]  # only the nodes are agents, not runs inside them
    calls = [s for s in spans if s.name == "openai.chat.completions.create"]
    lineage = {ancestors(c, by_id)[1]: ancestors(c, by_id) for c in calls}
    assert lineage == {
        "langchain.chain.write_query": ["langchain.llm.ChatOpenAI", "langchain.chain.write_query",
                                        "langchain.chain.LangGraph"],
        "langchain.chain.check_query": ["langchain.llm.ChatOpenAI", "langchain.chain.check_query",
                                        "langchain.chain.LangGraph"],
    }  # fmt: skip
    [tool_span] = [s for s in spans if s.name == "langchain.tool.run_sql"]
    assert ancestors(tool_span, by_id)[0] == "langchain.chain.check_query"
    assert "ran SELECT 1" in str(tool_span.attributes["langchain.outputs"])  # type: ignore[index]
    llm_spans = [s for s in spans if s.name == "langchain.llm.ChatOpenAI"]
    assert all(str(s.attributes["gen_ai.response.id"]).startswith("chatcmpl-scripted-") for s in llm_spans)  # type: ignore[index]
    assert handler.spans == {}  # every run it opened was ended


async def test_runs_outside_an_attempt_are_not_recorded(tracer: LogTracer, llm: ChatOpenAI) -> None:
    handler = tracer.get_langchain_handler()
    await graph(llm).ainvoke({"question": "q"}, {"callbacks": [handler]})
    tracer._drain()
    assert tracer.pending == {}


async def test_a_failing_node_ends_its_span_with_the_error(tracer: LogTracer) -> None:
    def boom(state: State) -> State:
        raise RuntimeError("no database")

    builder = StateGraph(State)
    builder.add_node("write_query", boom)
    builder.add_edge(START, "write_query")
    handler = tracer.get_langchain_handler(tags=["t"])
    with tracer.attempt("ro-1", "at-1"), pytest.raises(RuntimeError, match="no database"):
        await builder.compile().ainvoke({"question": "q"}, {"callbacks": [handler]})
    [node] = [s for s in spans_of(tracer) if s.name == "langchain.chain.write_query"]
    assert node.status.status_code.name == "ERROR" and "no database" in (node.status.description or "")
    assert node.attributes["langchain.tags"] == ("t",)  # type: ignore[index]
    assert handler.spans == {}


def test_without_langchain_core_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "langchain_core" or m.startswith("langchain_core.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if not installed
    monkeypatch.delitem(sys.modules, "voltbus.services.clients.agent.langchain_handler", raising=False)
    with pytest.raises(ImportError, match="pip install langchain-core"):
        LogTracer(store=None).get_langchain_handler()
