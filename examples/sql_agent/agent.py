"""A SQL agent, written the Agent Lightning 0.3 way (``import voltbus as agl``).

The policy (a 1 M-parameter character model) reads ``Q:who earns over 83?\\nSQL:`` and writes a
query; the agent runs it on the example's SQLite table (read-only, bounded in steps) and compares its
result rows with the gold query's. Reward 1 when they are equal (as sorted rows), 0 when not, or when
the query fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import weakref
import zlib
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

import voltbus as agl


def _load_data() -> Any:
    name = "voltbus_example_sql_data"
    if name not in sys.modules:  # one table per process, whichever file loads it first
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "data.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


data = _load_data()
_HTTP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()


def prompt(question: str) -> str:
    return f"Q:{question}\nSQL:"


def reward(sql: str, gold: str) -> float:
    """1.0 when ``sql`` returns the gold query's rows, else 0.0.

    >>> reward("select count(*) from emp where dept='hr'", "select count(*) from emp where 'hr'=dept")
    1.0
    >>> reward("select min(age) from emp", "select max(age) from emp"), reward("selec", "select 1")
    (0.0, 0.0)
    """
    got = data.execute(sql)
    return 1.0 if got is not None and got == data.execute(gold) else 0.0


def http_client() -> httpx.AsyncClient:
    """One HTTP client per event loop, shared by every rollout (building one costs ~50 ms of CPU)."""
    loop = asyncio.get_running_loop()
    if loop not in _HTTP:
        _HTTP[loop] = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256))
    return _HTTP[loop]


@agl.rollout
async def sql_agent(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """Ask for a query, run it, compare with the gold query's result. Training and validation both sample
    at temperature 1; validation with a seed per task, so two policies meet the same random draws."""
    client = AsyncOpenAI(base_url=llm.endpoint, api_key=llm.api_key or "none", max_retries=5, http_client=http_client())
    extra = {"seed": zlib.crc32(str(task["id"]).encode())} if rollout.mode != "train" else {}
    reply = await client.completions.create(
        model=llm.model, prompt=prompt(task["question"]), max_tokens=48, temperature=1.0, extra_body=extra
    )
    return reward(reply.choices[0].text.strip(), task["sql"])
