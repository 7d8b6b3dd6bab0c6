"""Agent Lightning 0.3's spider example (a LangGraph SQL agent, ``tests/examples/al03/sql_agent.py``) on voltbus
with only its import changed: it passes ``self.tracer.get_langchain_handler()`` to the graph as AL's example
does, and ``agent_match="write"`` (AL's ``adapter={"agent_match": "write"}``) trains exactly the write node's
model calls, with their token ids and the reward (the real bus, gateway, runner and projector; a scripted engine).
"""

from __future__ import annotations

import importlib
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb
import pytest

from tests.examples.scripted_engine import scripted_app, token_ids
from tests.services.gateway.stub_llm import serve
from voltbus.projections.adapter import AdapterSettings
from voltbus.schemas.resources import ProxyLLM
from voltbus.services.gateway import build_app as gateway_app
from voltbus.services.ops.reproject import reproject
from voltbus.services.settings import GatewaySettings, NatsSettings, Settings
from voltbus.store import EnqueueRolloutRequest, connect
from voltbus.trainer.system import local_system

WRITE = "```sqlite\nSELECT name FROM singer WHERE age > 30\n```"
"""The scripted engine's answer in the write node."""
TASKS = [  # the first one's gold query returns what the written query returns: reward 1; the second's does not
    {"question": "Who is older than 30?", "db_id": "concert", "query": "SELECT name FROM singer WHERE age >= 31"},
    {"question": "Who is 30 or younger?", "db_id": "concert", "query": "SELECT name FROM singer WHERE age <= 30"},
]


@pytest.fixture
def sql_agent() -> Iterator[ModuleType]:
    """AL's agent module. Importing it runs its ``agl.setup_logging(...)``, which (as in AL) gives the ``voltbus``
    logger a console handler and stops its propagation: put both loggers back for the tests after this one."""
    names = ("voltbus", "tests.examples.al03.sql_agent")
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in map(logging.getLogger, names)]
    try:
        yield importlib.import_module("tests.examples.al03.sql_agent")
    finally:
        for logger, handlers, level, propagate in saved:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """The write node gets a query, the check node the verdict that ends the graph."""
    system = body["messages"][0]["content"]
    if "create a syntactically correct" in system:
        return {"role": "assistant", "content": WRITE}
    assert system.startswith("You are a SQL expert"), system  # the rewrite node is never reached
    return {"role": "assistant", "content": "No mistakes found.\nTHE QUERY IS CORRECT."}


def spider_data(root: Path) -> Path:
    """Spider's layout: ``database/<db_id>/<db_id>.sqlite`` and its ``schema.sql``."""
    folder = root / "database" / "concert"
    folder.mkdir(parents=True)
    schema = "CREATE TABLE singer (name TEXT, age INTEGER);"
    with sqlite3.connect(folder / "concert.sqlite") as con:
        con.execute(schema)
        con.executemany("INSERT INTO singer VALUES (?, ?)", [("Ann", 29), ("Bob", 41), ("Cy", 35)])
    (folder / "schema.sql").write_text(schema)
    return root


async def triplets(settings: Settings, db: Path, adapter: AdapterSettings) -> list[tuple[Any, ...]]:
    await reproject(settings, db, adapter, say=lambda _: None)
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT rollout_id, agent_name, prompt_ids, response_ids, logprobs, reward FROM triplets "
            "ORDER BY rollout_id, call_index"
        ).fetchall()


@pytest.mark.timeout(300)
async def test_agent_match_on_a_langgraph_node_trains_its_calls(
    nats_settings: NatsSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sql_agent: ModuleType
) -> None:
    monkeypatch.setenv("VERL_SPIDER_DATA_DIR", str(spider_data(tmp_path / "spider")))
    received: list[dict[str, Any]] = []
    async with serve(scripted_app(reply, received)) as engine:
        settings = Settings(nats=nats_settings, gateway=GatewaySettings(upstream_url=f"{engine}/v1"))
        async with (
            serve(gateway_app(settings), "on") as gateway,
            local_system(settings, sql_agent.LitSQLAgent(), n_runners=2) as wired,
        ):
            store = await connect(settings=wired.nats, name="test-al03-spider")
            store.runner_group = wired.runner.group
            try:
                llm = ProxyLLM(endpoint=f"{gateway}/v1", model="scripted", sampling_parameters={"temperature": 0.7})
                await store.add_resources({"main_llm": llm})
                requests = [EnqueueRolloutRequest(input=t, mode="train") for t in TASKS]
                queued = await store.enqueue_many_rollouts(requests)
                ids = [r.rollout_id for r in queued]
                done = await store.wait_for_rollouts(rollout_ids=ids, timeout=120)
            finally:
                await store.close()
    assert [r.status for r in done] == ["succeeded"] * 2, [r.attempt.error for r in done if r.attempt]
    assert len(received) == 4  # write and check, in each rollout
    selected = await triplets(settings, tmp_path / "write.duckdb", AdapterSettings(agent_match="write"))
    assert sorted((rid, agent) for rid, agent, *_ in selected) == sorted((rid, "write_query") for rid in ids)
    for _, _, prompt, response, logprobs, _ in selected:
        assert prompt and response == token_ids(WRITE) and logprobs == [-0.5] * len(response)
    assert {rid: reward for rid, *_, reward in selected} == {ids[0]: 1.0, ids[1]: 0.0}
    every = await triplets(settings, tmp_path / "all.duckdb", AdapterSettings())
    assert [agent for _, agent, *_ in every] == ["write_query", "check_query"] * 2  # the match chose among these
