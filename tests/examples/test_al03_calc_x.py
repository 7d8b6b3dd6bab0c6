"""Agent Lightning 0.3's calc_x example (an autogen ``AssistantAgent`` with an MCP calculator tool,
``tests/examples/al03/calc_agent.py``) on voltbus with only its import changed: against a scripted engine that
calls the tool and then answers, the record in SQL has both model calls with token ids, the tool call and its
result, and the reward (the real bus, gateway, runner and projector; the MCP server a real stdio subprocess).

autogen-core pins protobuf 5 while the ``dev`` extra's TensorBoard needs protobuf 6, so these run in a venv of
their own, with the ``autogen`` extra (``bash .ci/autogen``; ``pytest -m autogen``).
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.examples.scripted_engine import scripted_app, token_ids, tool_call
from tests.services.gateway.stub_llm import serve
from voltbus.projections.adapter import AdapterSettings
from voltbus.schemas.resources import ProxyLLM
from voltbus.services.gateway import build_app as gateway_app
from voltbus.services.ops.reproject import reproject
from voltbus.services.settings import GatewaySettings, NatsSettings, Settings
from voltbus.store import EnqueueRolloutRequest, connect
from voltbus.trainer.system import local_system

pytestmark = pytest.mark.autogen

ANSWER = "12 times 15 is 180. ### ANSWER: 180 ###"
TASKS = [  # the answer is right for the first task (reward 1) and wrong for the second (reward 0)
    {"id": "debug-1", "question": "What is 12 multiplied by 15?", "chain": "", "result": "180", "source": "debug"},
    {"id": "debug-2", "question": "What is 12 multiplied by 15?", "chain": "", "result": "200", "source": "debug"},
]


def reply(body: dict[str, Any]) -> dict[str, Any]:
    """Call the calculator first; once its result is in the conversation, answer."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return {"role": "assistant", "content": ANSWER}
    assert [t["function"]["name"] for t in body.get("tools", [])] == ["calculate"]  # the MCP server's tool
    return tool_call("calculate", {"expression": "12 * 15"})


@pytest.mark.timeout(300)
async def test_the_autogen_mcp_agents_calls_tool_and_reward_are_recorded(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    calc_agent = importlib.import_module("tests.examples.al03.calc_agent")  # autogen: only in its own venv
    received: list[dict[str, Any]] = []
    async with serve(scripted_app(reply, received)) as engine:
        settings = Settings(nats=nats_settings, gateway=GatewaySettings(upstream_url=f"{engine}/v1"))
        async with (
            serve(gateway_app(settings), "on") as gateway,
            local_system(settings, calc_agent.calc_agent, n_runners=2) as wired,
        ):
            store = await connect(settings=wired.nats, name="test-al03-calc-x")
            store.runner_group = wired.runner.group
            try:
                llm = ProxyLLM(endpoint=f"{gateway}/v1", model="scripted", sampling_parameters={"temperature": 0.7})
                await store.add_resources({"main_llm": llm})
                requests = [EnqueueRolloutRequest(input=t, mode="train") for t in TASKS]
                ids = [r.rollout_id for r in await store.enqueue_many_rollouts(requests)]
                done = await store.wait_for_rollouts(rollout_ids=ids, timeout=180)
            finally:
                await store.close()
    assert [r.status for r in done] == ["succeeded"] * 2, [r.attempt.error for r in done if r.attempt]
    assert len(received) == 4  # the tool call and the answer, in each rollout
    db = tmp_path / "calc.duckdb"
    await reproject(settings, db, AdapterSettings(), say=lambda _: None)
    with duckdb.connect(str(db), read_only=True) as con:
        calls = con.execute(
            "SELECT rollout_id, status, prompt_ids, response_ids, logprobs, request, response FROM model_calls "
            "ORDER BY rollout_id, seq, seq_index"
        ).fetchall()
        rewards = dict(con.execute("SELECT rollout_id, value FROM rewards").fetchall())
        triplets = con.execute("SELECT rollout_id, response_ids, reward FROM triplets").fetchall()
    assert sorted(rid for rid, *_ in calls) == sorted(ids * 2)
    for rid in ids:
        first, second = [c for c in calls if c[0] == rid]
        assert first[1] == second[1] == "ok" and first[2] and second[2]
        tool = json.loads(first[6])["choices"][0]["message"]["tool_calls"][0]["function"]
        assert tool == {"name": "calculate", "arguments": '{"expression": "12 * 15"}'}  # the tool call kept
        assert first[3] == token_ids(json.dumps(tool_call("calculate", {"expression": "12 * 15"})["tool_calls"]))
        tool_results = [m for m in json.loads(second[5])["messages"] if m.get("role") == "tool"]
        assert [m["content"] for m in tool_results] == ["180"]  # the MCP server's result, sent back to the model
        assert second[3] == token_ids(ANSWER) and second[4] == [-0.5] * len(second[3])
    assert rewards == {ids[0]: 1.0, ids[1]: 0.0}
    assert sorted(len(r[1]) > 0 for r in triplets) == [True] * 4  # both calls of both rollouts, with token ids
