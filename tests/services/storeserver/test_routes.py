"""Agent Lightning 0.3's store routes on ``voltbus store-server``, over real HTTP, a real bus and a real projector:
each route's answer in Agent Lightning's shape, and a precise 4xx (never a 500) for each kind of bad request."""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import AGL


def al_span(rollout_id: str, attempt_id: str, seq: int, span_id: str, parent: str | None = None) -> dict[str, Any]:
    """A span as Agent Lightning's client posts it (``Span.model_dump(mode="json")``)."""
    ctx = {"trace_id": "ab" * 16, "span_id": span_id, "is_remote": False, "trace_state": {}}
    return {
        "rollout_id": rollout_id,
        "attempt_id": attempt_id,
        "sequence_id": seq,
        "trace_id": "ab" * 16,
        "span_id": span_id,
        "parent_id": parent,
        "name": f"step-{span_id}",
        "status": {"status_code": "OK", "description": None},
        "attributes": {"tool": "calc", "n": 3},
        "events": [{"name": "note", "attributes": {"k": "v"}, "timestamp": 1.5}],
        "links": [],
        "start_time": 1.0,
        "end_time": 2.0,
        "context": ctx,
        "parent": None,
        "resource": {"attributes": {"service.name": "agent"}, "schema_url": ""},
    }


async def post(http: httpx.AsyncClient, path: str, body: Any = None, status: int = 200) -> Any:
    """POST ``body`` to a store route; assert the status; the JSON answer."""
    response = await http.post(AGL + path, json=body)
    assert response.status_code == status, response.text
    return response.json()


async def get(http: httpx.AsyncClient, path: str, status: int = 200, **params: Any) -> Any:
    response = await http.get(AGL + path, params=params)
    assert response.status_code == status, response.text
    return response.json()


async def test_a_rollout_from_enqueue_to_its_spans(http: httpx.AsyncClient) -> None:
    assert await get(http, "/health") == {"status": "ok"}
    queued = await post(http, "/queues/rollouts/enqueue", {"rollouts": [{"input": {"q": 1}, "mode": "train"}]}, 201)
    assert [(r["status"], r["input"], r["mode"]) for r in queued] == [("queuing", {"q": 1}, "train")]
    rid = queued[0]["rollout_id"]
    [claimed] = await post(http, "/queues/rollouts/dequeue", {"limit": 1, "worker_id": "w-1"})
    assert claimed["rollout_id"] == rid and claimed["attempt"]["worker_id"] == "w-1"
    aid = claimed["attempt"]["attempt_id"]
    assert await post(http, "/queues/rollouts/dequeue", {"limit": 1}) == []  # nothing left
    seq = (await post(http, "/spans/next", {"rollout_id": rid, "attempt_id": aid}))["sequence_id"]
    stored = await post(http, "/spans", al_span(rid, aid, seq, "1" * 16), 201)
    assert stored["context"]["span_id"] == "1" * 16 and stored["resource"]["attributes"] == {"service.name": "agent"}
    await post(http, "/spans", al_span(rid, aid, seq + 1, "2" * 16, parent="1" * 16), 201)
    attempt = await post(http, f"/rollouts/{rid}/attempts/{aid}", {"status": "succeeded"})
    assert attempt["status"] == "succeeded" and attempt["end_time"] is not None
    [done] = await post(http, "/waits/rollouts", {"rollout_ids": [rid], "timeout": 0.1})
    assert done["status"] == "succeeded"
    page = await post(http, "/spans/search", {"rollout_id": rid, "attempt_id": aid})
    assert page["total"] == 2 and [s["span_id"] for s in page["items"]] == ["1" * 16, "2" * 16]
    child = page["items"][1]
    assert child["parent_id"] == "1" * 16 and child["parent"]["span_id"] == "1" * 16
    assert child["events"] == [{"name": "note", "attributes": {"k": "v"}, "timestamp": 1.5}]
    assert (await get(http, "/spans", rollout_id=rid, name="step-" + "2" * 16))["total"] == 1
    by_status = await get(http, "/rollouts", status_in=["succeeded", "failed"])
    assert [r["rollout_id"] for r in by_status["items"]] == [rid] and by_status["items"][0]["attempt"][
        "attempt_id"
    ] == aid
    assert (await post(http, "/rollouts/search", {"rollout_id_in": [rid]}))["total"] == 1
    stats = await get(http, "/statistics")
    assert stats["total_rollouts"] == 1 and stats["total_spans"] == 2


async def test_start_rollout_attempts_and_update(http: httpx.AsyncClient) -> None:
    started = await post(http, "/rollouts", {"input": "task", "mode": "val", "worker_id": "w-9"}, 201)
    rid, first = started["rollout_id"], started["attempt"]["attempt_id"]
    assert started["status"] == "preparing" and started["attempt"]["sequence_id"] == 1
    second = await post(http, f"/rollouts/{rid}/attempts", None, 201)
    assert second["attempt"]["sequence_id"] == 2
    latest = await get(http, f"/rollouts/{rid}/attempts/latest")
    assert latest["attempt_id"] == second["attempt"]["attempt_id"]
    page = await post(http, f"/rollouts/{rid}/attempts/search", {"sort_order": "desc"})
    assert [a["attempt_id"] for a in page["items"]] == [second["attempt"]["attempt_id"], first]
    assert (await get(http, f"/rollouts/{rid}/attempts", limit=1))["items"][0]["attempt_id"] == first
    updated = await post(http, f"/rollouts/{rid}", {"metadata": {"tag": "x"}, "status": "cancelled"})
    assert updated["status"] == "cancelled" and updated["metadata"] == {"tag": "x"}
    assert (await get(http, f"/rollouts/{rid}"))["status"] == "cancelled"
    assert await get(http, "/rollouts/ro-none") is None  # Agent Lightning answers null for an unknown rollout


async def test_resources_and_workers(http: httpx.AsyncClient) -> None:
    llm = {"resource_type": "llm", "endpoint": "http://e/v1", "model": "m", "sampling_parameters": {"temperature": 0.5}}
    first = await post(http, "/resources", {"main_llm": llm}, 201)
    rsid = first["resources_id"]
    assert first["version"] == 1 and first["resources"]["main_llm"]["model"] == "m"
    prompt = {"resource_type": "prompt_template", "template": "Q: {q}", "engine": "f-string"}
    second = await post(http, f"/resources/{rsid}", {"prompt": prompt})
    assert second["version"] == 2
    assert (await get(http, "/resources/latest"))["resources"] == {"prompt": prompt}
    assert (await get(http, f"/resources/{rsid}"))["version"] == 2
    assert (await get(http, "/resources", resources_id=rsid))["total"] == 1
    assert await get(http, "/resources/rs-none") is None
    worker = await post(http, "/workers/w-1", {"heartbeat_stats": {"cpu": 0.5}})
    assert worker["worker_id"] == "w-1" and worker["last_heartbeat_time"] is not None
    assert (await get(http, "/workers/w-1"))["heartbeat_stats"]["cpu"] == 0.5
    assert [w["worker_id"] for w in (await post(http, "/workers/search", {"worker_id_contains": "w-"}))["items"]] == [
        "w-1"
    ]
    assert (await get(http, "/workers"))["total"] == 1


async def test_bad_requests_get_a_precise_4xx(http: httpx.AsyncClient) -> None:
    raw = await http.post(
        AGL + "/queues/rollouts/enqueue", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert raw.status_code == 400 and raw.json()["code"] == "invalid_json"
    assert (await post(http, "/queues/rollouts/enqueue", {"rollouts": [{"mode": "train"}]}, 422))[
        "code"
    ] == "invalid_request"
    assert "mode" in (await post(http, "/rollouts", {"input": 1, "mode": "play"}, 422))["detail"]
    assert (await post(http, "/rollouts/ro-none/attempts/at-none", {"status": "succeeded"}, 404))["code"] == "not_found"
    assert (await post(http, "/waits/rollouts", {"rollout_ids": ["ro-none"]}, 404))["code"] == "not_found"
    assert (await post(http, "/spans/next", {"rollout_id": "ro-none", "attempt_id": "at-1"}, 404))[
        "code"
    ] == "not_found"
    assert "limit" in (await get(http, "/rollouts", 400, limit=0))["detail"]
    assert (await get(http, "/rollouts", 422, limit="many"))["code"] == "invalid_request"
    assert "cannot sort" in (await get(http, "/rollouts", 400, sort_by="input"))["detail"]
    assert (await post(http, "/spans/search", {"attempt_id": "x"}, 422))["code"] == "invalid_request"  # no rollout_id
    done = await post(http, "/rollouts", {"input": 1}, 201)
    await post(http, f"/rollouts/{done['rollout_id']}", {"status": "cancelled"})
    assert (await post(http, f"/rollouts/{done['rollout_id']}", {"status": "queuing"}, 409))["code"] == "conflict"
    assert (await post(http, f"/rollouts/{done['rollout_id']}", {"input": 2}, 400))["code"] == "invalid_request"
    assert (await post(http, "/workers/a.b", {}, 400))["code"] == "invalid_request"  # no subject can hold the id
    assert (await post(http, "/resources", {"x": {"resource_type": "nope"}}, 422))["code"] == "invalid_request"
    assert (await http.get(AGL + "/nowhere")).status_code == 404
    assert (await http.delete(AGL + "/rollouts")).status_code == 405
    assert (await http.post("/v1/metrics", content=b"")).status_code == 501


async def test_a_body_past_the_limit_is_413(http: httpx.AsyncClient) -> None:
    big = {"rollouts": [{"input": "x" * (9 * 1024 * 1024)}]}
    response = await http.post(AGL + "/queues/rollouts/enqueue", json=big)
    assert response.status_code == 413 and response.json()["code"] == "too_large"
