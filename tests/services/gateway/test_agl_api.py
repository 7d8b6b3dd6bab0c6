"""Agent Lightning 1.0's rollout and model routes on the gateway, over real HTTP and the real bus: creation
(idempotent by the caller's id), reading (an agent its own rollout), the attempt's events (raw and
``format=triplet``), deletion (a cancel), the models routes, their keys, and bad input."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import wait_for
from voltbus.services.keys import rollout_key
from voltbus.store import Store

from .conftest import GatewayFactory
from .stub_llm import PROMPT_IDS

ADMIN, SECRET = "admin-key", "rollout-secret"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}
JSON = {"content-type": "application/json"}
GSM8K = {"timeout_seconds": 300, "local": {"agent_class": "examples.gsm8k.gsm8k_agent.ChatAgent",
         "env_map": {"QUESTION": "input.question", "ANSWER": "input.answer"}}, "k8s": None}  # fmt: skip


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_rollouts_are_created_once_read_and_deleted(make_gateway: GatewayFactory, store: Store) -> None:
    """As AL 1.0's trainer creates them (a list, ids chosen by the caller, retried safely), an agent reads its own
    (smith_agent's ``fetch_eval_meta``), and the trainer deletes them."""
    g = await make_gateway(admin_key=ADMIN, key_secret=SECRET)
    first = {"input": {"question": "6*7", "answer": "42"}, "is_train": False, "config": GSM8K, "rollout_id": "a1b2"}
    second = {"input": {"question": "1+1"}, "metadata": {"batch_idx": 3}}
    async with httpx.AsyncClient(base_url=g.url, headers=ADMIN_HEADERS) as http:
        created = await http.post("/api/rollouts", json=[first, second])
        again = await http.post("/api/rollouts", json=[{**first, "input": {"question": "other"}}])
        assert (created.status_code, again.status_code) == (201, 201), created.text
        one, two = created.json()
        assert again.json() == [one]  # the existing rollout, unchanged
        assert (one["rollout_id"], one["input"], one["is_train"], one["config"]) == (
            "a1b2",
            first["input"],
            False,
            GSM8K,
        )
        assert one["status"]["state"] == "queuing" and one["status"]["last_attempt_id"] is None
        assert two["is_train"] and two["metadata"] == {"batch_idx": 3} and two["config"]["timeout_seconds"] == 3600
        queued = await store.get_rollout_by_id("a1b2")
        assert queued is not None and queued.mode == "val"
        assert (queued.config.timeout_seconds, queued.config.env_map) == (300, GSM8K["local"]["env_map"])

        own = await http.get("/api/rollouts/a1b2", headers=bearer(rollout_key(SECRET, "a1b2")))
        other = await http.get("/api/rollouts/a1b2", headers=bearer(rollout_key(SECRET, two["rollout_id"])))
        anonymous = await http.get("/api/rollouts/a1b2", headers={"Authorization": ""})
        assert own.status_code == 200 and own.json() == {"rollout": one, "attempts": []}
        assert (other.status_code, anonymous.status_code) == (403, 401)

        deleted = await http.delete("/api/rollouts/a1b2")
        unknown = await http.delete("/api/rollouts/nope")
        assert (deleted.status_code, unknown.status_code) == (204, 204)
        cancelled = await store.get_rollout_by_id("a1b2")
        assert cancelled is not None and cancelled.status == "cancelled"
        after = await http.get("/api/rollouts/a1b2")
        assert after.json()["rollout"]["status"]["state"] == "failed"
        assert (await http.get("/api/rollouts/nope")).status_code == 404


async def test_an_attempt_s_events_raw_and_as_triplets(make_gateway: GatewayFactory) -> None:
    """A model call through the AL 1.0 proxy URL and a posted reward are the attempt's ``model_request`` and
    ``reward`` events; ``format=triplet`` trims them as AL's trainer reads them."""
    g = await make_gateway(admin_key=ADMIN, key_secret=SECRET)
    agent = bearer(rollout_key(SECRET, g.rid))
    base = f"/proxy/rollout/{g.rid}/attempt/{g.aid}/mode/train/openai/v1"
    async with httpx.AsyncClient(base_url=g.url, headers=ADMIN_HEADERS) as http:
        call = {"model": "auto", "messages": [{"role": "user", "content": "6*7"}]}
        assert (await http.post(f"{base}/chat/completions", json=call, headers=agent)).status_code == 200
        reward = {"event_type": "reward", "data": {"value": 0.5}}
        assert (await http.post(f"/api/rollouts/{g.rid}/attempt/{g.aid}/events", json=reward, headers=agent)).is_success

        async def both() -> list[dict[str, Any]] | None:
            events = (await http.get(f"/api/rollouts/{g.rid}/events")).json()
            return events if len(events) == 2 else None

        raw = await wait_for(both, timeout=30, what="the call and the reward")
        triplets = (await http.get(f"/api/rollouts/{g.rid}/events", params={"format": "triplet"})).json()
        rewards = (await http.get(f"/api/rollouts/{g.rid}/events", params={"event_type": "reward"})).json()
        as_agent = await http.get(f"/api/rollouts/{g.rid}/events", headers=agent)
    assert [e["event_type"] for e in raw] == ["model_request", "reward"]
    assert {e["attempt_id"] for e in raw} == {g.aid}
    assert raw[0]["data"]["request"]["messages"] == call["messages"] and raw[0]["data"]["status"] == "ok"
    assert triplets[0]["data"] == {
        "prompt_token_ids": PROMPT_IDS,
        "response_token_ids": [52, 50],
        "response_log_probs": [-0.125, -0.25],
        "server": {"model": raw[0]["data"]["model"], "version": raw[0]["data"]["model_version"]},
        "http_status": 200,
        "status": "ok",
    }
    assert triplets[1]["data"] == {"value": 0.5} and rewards == [raw[1]]
    assert as_agent.status_code == 403  # the events of every attempt are the trainer's to read


async def test_bad_input_and_wrong_keys_get_precise_answers(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(admin_key=ADMIN, agent_key="agent-key", max_body_bytes=4096)
    async with httpx.AsyncClient(base_url=g.url, headers=ADMIN_HEADERS) as http:
        cases = {
            "not a list": (await http.post("/api/rollouts", json={"input": 1}), 422),
            "no input": (await http.post("/api/rollouts", json=[{"is_train": True}]), 422),
            "bad config": (await http.post("/api/rollouts", json=[{"input": 1, "config": {"timeout_seconds": "x"}}]),
                           422),
            "dotted id": (await http.post("/api/rollouts", json=[{"input": 1, "rollout_id": "a.b"}]), 422),
            "reserved id": (await http.post("/api/rollouts", json=[{"input": 1, "rollout_id": "_workers"}]), 422),
            "bad JSON": (await http.post("/api/rollouts", content=b"[{", headers=JSON), 400),
            "too large": (await http.post("/api/rollouts", json=[{"input": "x" * 5000}]), 413),
            "agent key": (await http.post("/api/rollouts", json=[{"input": 1}], headers=bearer("agent-key")), 403),
            "no key": (await http.post("/api/rollouts", json=[{"input": 1}], headers={"Authorization": ""}), 401),
            "bad format": (await http.get(f"/api/rollouts/{g.rid}/events", params={"format": "xml"}), 422),
            "bad id": (await http.get("/api/rollouts/a.b"), 400),
            "agent deletes": (await http.delete(f"/api/rollouts/{g.rid}", headers=bearer("agent-key")), 403),
        }  # fmt: skip
    wrong = {name: (r.status_code, r.text) for name, (r, status) in cases.items() if r.status_code != status}
    assert wrong == {}
    assert "rollout id '_workers'" in cases["reserved id"][0].json()["error"]["message"]
    assert "Expected `array`" in cases["not a list"][0].json()["error"]["message"]


async def test_models_are_this_gateway_s_engines(make_gateway: GatewayFactory) -> None:
    """AL's trainer registers the engines it serves: the gateway's own are accepted, others refused with the reason,
    and clearing them is refused (they are settings; pausing stops calls)."""
    g = await make_gateway(admin_key=ADMIN, agent_key="agent-key")
    async with httpx.AsyncClient(base_url=g.url, headers=ADMIN_HEADERS) as http:
        engines = [e["url"] for e in (await http.get("/healthz")).json()["engines"]]
        known = [{"model": "policy", "endpoint": url + "/"} for url in engines]
        ok = await http.post("/api/models", json=known)
        unknown = await http.post("/api/models", json=[{"model": "m", "endpoint": "http://10.0.0.9:8000/v1"}])
        bad = await http.post("/api/models", json=[{"model": "m"}])
        cleared = await http.delete("/api/models")
        as_agent = await http.post("/api/models", json=known, headers=bearer("agent-key"))
    assert engines and ok.status_code == 201 and ok.json() == [{**m, "version": 0} for m in known]
    assert unknown.status_code == 409 and "http://10.0.0.9:8000/v1" in unknown.json()["error"]["message"]
    assert bad.status_code == 422 and cleared.status_code == 409 and as_agent.status_code == 403
