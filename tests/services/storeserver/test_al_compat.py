"""The real ``agentlightning==0.3.0`` against ``voltbus store-server``: its own ``LightningStoreClient`` adds resources
and enqueues rollouts, its ``LitAgentRunner`` (OtelTracer, spans sent over OTLP) claims and completes them, its
``wait_for_rollouts`` and ``query_spans`` see them; voltbus's SQL projection shows the same rollouts, spans and rewards.
Agent Lightning runs in its own venv (``VOLTBUS_TEST_AL_PYTHON``), reaching the server with the token in its URL."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from voltbus.services.settings import NatsSettings

from ...conftest import al_python, wait_for
from .conftest import store_server
from .test_otlp import sql

pytestmark = pytest.mark.al_compat
SCRIPT = Path(__file__).with_name("al_client.py")
TOKEN = "al-t0ken"


def test_a_missing_interpreter_skips_with_its_reason_or_fails_where_required() -> None:
    with pytest.raises(pytest.skip.Exception, match="VOLTBUS_TEST_AL_PYTHON.*VOLTBUS_TEST_REQUIRE_AL"):
        al_python(None, require=False)
    with pytest.raises(pytest.fail.Exception, match="VOLTBUS_TEST_REQUIRE_AL is set"):
        al_python("/nonexistent/python", require=True)
    assert al_python(sys.executable, require=True) == sys.executable


async def run_agent_lightning(python: str, url: str, n: int) -> dict[str, Any]:
    """``al_client.py`` under Agent Lightning's interpreter; what it saw."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # Agent Lightning imports litellm: no network
    pipe = asyncio.subprocess.PIPE
    child = await asyncio.create_subprocess_exec(python, str(SCRIPT), url, str(n), stdout=pipe, stderr=pipe, env=env)
    try:
        out, err = await asyncio.wait_for(child.communicate(), 300)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    assert child.returncode == 0, err.decode(errors="replace")[-6000:]
    return json.loads(out.decode().strip().splitlines()[-1])


async def test_agent_lightning_client_and_runner_run_on_voltbus(nats_settings: NatsSettings, tmp_path: Path) -> None:
    python = al_python()
    async with store_server(nats_settings, tmp_path / "p.duckdb", token=TOKEN) as served:
        url = served.url.replace("http://", f"http://agl:{TOKEN}@")
        seen = await run_agent_lightning(python, url, 3)
        ids = seen["ids"]
        assert len(ids) == 3 and sorted(seen["succeeded"]) == sorted(ids)
        assert [r["status"] for r in seen["done"]] == ["succeeded"] * 3
        assert seen["latest_attempt"]["status"] == "succeeded" and seen["latest_attempt"]["worker_id"]
        assert [w["status"] for w in seen["workers"]] == ["idle"] and seen["worker"]["status"] == "idle"
        assert [a["status"] for a in seen["attempts"]] == ["succeeded"]
        assert seen["rollout"]["attempt"]["attempt_id"] == seen["attempts"][0]["attempt_id"]
        assert seen["resources"] == [seen["resources_id"], 1, 1]
        assert seen["cancelled"] == "cancelled" and seen["statistics"]["total_rollouts"] == 4
        for rid in ids:
            names = [s["name"] for s in seen["spans"][rid]]
            assert "tool" in names and "agentlightning.annotation" in names, names  # its span and its reward span
            tool = next(s for s in seen["spans"][rid] if s["name"] == "tool")
            assert tool["resource"]["attributes"]["agentlightning.rollout_id"] == rid
        projected = await wait_for(
            lambda: projection(served.projector_url, ids), timeout=60, what="Agent Lightning's rollouts in SQL"
        )
        q_of = {rid: i for i, rid in enumerate(ids)}  # enqueued in order: rollout i has q = i
        assert {r["rollout_id"]: r["status"] for r in projected["rollouts"]} == dict.fromkeys(ids, "succeeded")
        assert {r["rollout_id"]: r["value"] for r in projected["rewards"]} == {rid: q_of[rid] / 10 for rid in ids}
        for rid in ids:
            in_sql = sorted(r["span_id"] for r in projected["spans"] if r["rollout_id"] == rid)
            assert in_sql == sorted(s["span_id"] for s in seen["spans"][rid])


async def projection(projector_url: str, ids: list[str]) -> dict[str, list[dict[str, Any]]] | None:
    """Rollouts, rewards and spans of ``ids`` in the projection, once every rollout is there succeeded."""
    rollouts = await sql(
        projector_url, "SELECT rollout_id, status FROM rollouts WHERE list_contains($ids, rollout_id)", ids=ids
    )
    rewards = await sql(
        projector_url, "SELECT rollout_id, value FROM rewards WHERE list_contains($ids, rollout_id)", ids=ids
    )
    if len(rewards) < len(ids) or any(r["status"] != "succeeded" for r in rollouts) or len(rollouts) < len(ids):
        return None
    spans = await sql(
        projector_url, "SELECT rollout_id, span_id FROM spans WHERE list_contains($ids, rollout_id)", ids=ids
    )
    return {"rollouts": rollouts, "rewards": rewards, "spans": spans}
