"""OTLP/HTTP trace ingest (``POST /v1/traces``): spans sent by OpenTelemetry's own OTLP HTTP exporter (protobuf), or
as OTLP JSON (gzipped), land on the attempt their attributes name, with their parents, and the projection (SQL)
shows them as it shows a voltbus runner's spans. Spans that cannot be placed are counted in ``partial_success``."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from voltbus.projections.ipc import from_ipc

from ...conftest import wait_for
from .conftest import AGL, Served


async def running_attempt(http: httpx.AsyncClient) -> tuple[str, str]:
    """A rollout enqueued and claimed over the store API: its (rollout id, attempt id)."""
    await http.post(AGL + "/queues/rollouts/enqueue", json={"rollouts": [{"input": "q"}]})
    [claimed] = (await http.post(AGL + "/queues/rollouts/dequeue", json={"worker_id": "w-1"})).json()
    return claimed["rollout_id"], claimed["attempt"]["attempt_id"]


def export_tree(url: str, rollout_id: str, attempt_id: str, headers: dict[str, str] | None = None) -> None:
    """An agent's three spans (a root, a child with an event, a grandchild) through the SDK's OTLP HTTP exporter."""
    ids = {"agentlightning.rollout_id": rollout_id, "agentlightning.attempt_id": attempt_id}
    provider = TracerProvider(resource=Resource.create({"service.name": "any-agent", **ids}))
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers=headers)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent", attributes={"task": "q"}):
        with tracer.start_as_current_span("tool") as tool:
            tool.add_event("called", {"arg": 2})
            with tracer.start_as_current_span("llm", attributes={"tokens": [1, 2, 3]}):
                pass
    provider.shutdown()


async def test_sdk_exporter_spans_reach_the_attempt_with_parents(server_url: str, http: httpx.AsyncClient) -> None:
    rid, aid = await running_attempt(http)
    await asyncio.to_thread(export_tree, server_url, rid, aid)  # the SDK's exporter is blocking
    page = (await http.post(AGL + "/spans/search", json={"rollout_id": rid, "attempt_id": aid})).json()
    spans = {s["name"]: s for s in page["items"]}
    assert set(spans) == {"agent", "tool", "llm"}
    assert spans["agent"]["parent_id"] is None
    assert spans["tool"]["parent_id"] == spans["agent"]["span_id"]
    assert spans["llm"]["parent_id"] == spans["tool"]["span_id"]
    assert len({s["trace_id"] for s in spans.values()}) == 1
    assert spans["llm"]["attributes"] == {"tokens": [1, 2, 3]}
    assert spans["tool"]["events"][0]["name"] == "called" and spans["tool"]["events"][0]["attributes"] == {"arg": 2}
    assert spans["agent"]["resource"]["attributes"]["service.name"] == "any-agent"
    assert sorted(s["sequence_id"] for s in spans.values()) == [1, 2, 3]  # the rollout's counter, in export order
    # the attempt went running with its first span, as with a voltbus runner's spans
    assert (await http.get(f"{AGL}/rollouts/{rid}")).json()["attempt"]["status"] == "running"


async def sql(projector_url: str, text: str, **params: Any) -> list[dict[str, Any]]:
    """Rows of ``text`` from the projector's SQL endpoint."""
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.post(f"{projector_url}/sql", json={"sql": text, "params": params})
    assert response.status_code == 200, response.text
    return from_ipc(response.content).to_pylist()


async def test_the_projection_shows_otlp_spans_in_sql(served: Served, http: httpx.AsyncClient) -> None:
    rid, aid = await running_attempt(http)
    await asyncio.to_thread(export_tree, served.url, rid, aid)
    await http.post(f"{AGL}/rollouts/{rid}/attempts/{aid}", json={"status": "succeeded"})
    query = "SELECT name, span_id, parent_id, attempt_id FROM spans WHERE rollout_id = $rid ORDER BY sequence_id"

    async def projected() -> list[dict[str, Any]]:
        rows = await sql(served.projector_url, query, rid=rid)
        return rows if len(rows) == 3 else []

    rows = await wait_for(projected, timeout=60, what="the three OTLP spans in the projection")
    by_name = {r["name"]: r for r in rows}
    assert {r["attempt_id"] for r in rows} == {aid}
    assert by_name["tool"]["parent_id"] == by_name["agent"]["span_id"]
    assert by_name["llm"]["parent_id"] == by_name["tool"]["span_id"]
    [status] = await sql(served.projector_url, "SELECT status FROM rollouts WHERE rollout_id = $rid", rid=rid)
    assert status["status"] == "succeeded"


def otlp_json(rollout_id: str | None, attempt_id: str | None, names: list[str]) -> dict[str, Any]:
    """An OTLP JSON export (hex ids, camelCase) of one resource's spans, the second a child of the first."""
    resource = [{"key": "service.name", "value": {"stringValue": "ts-agent"}}]
    if rollout_id and attempt_id:
        resource.append({"key": "agentlightning.rollout_id", "value": {"stringValue": rollout_id}})
        resource.append({"key": "agentlightning.attempt_id", "value": {"stringValue": attempt_id}})
    spans = [
        {
            "traceId": "5b8efff798038103d269b633813fc60c",
            "spanId": f"eee19b7ec3c1b17{i}",
            "parentSpanId": "eee19b7ec3c1b170" if i else "",
            "name": name,
            "kind": 1,
            "startTimeUnixNano": "1544712660000000000",
            "endTimeUnixNano": "1544712661000000000",
            "attributes": [{"key": "step", "value": {"intValue": str(i)}}],
            "status": {"code": 1},
        }
        for i, name in enumerate(names)
    ]
    return {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]}


async def test_otlp_json_gzipped(http: httpx.AsyncClient) -> None:
    rid, aid = await running_attempt(http)
    body = gzip.compress(httpx.Request("POST", "/", json=otlp_json(rid, aid, ["plan", "act"])).read())
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    response = await http.post("/v1/traces", content=body, headers=headers)
    assert response.status_code == 200 and response.json() == {}
    page = (await http.post(AGL + "/spans/search", json={"rollout_id": rid})).json()
    plan, act = page["items"]
    assert (plan["name"], act["name"], act["parent_id"]) == ("plan", "act", plan["span_id"])
    assert plan["trace_id"] == "5b8efff798038103d269b633813fc60c" and act["attributes"] == {"step": 1}
    assert plan["status"]["status_code"] == "OK" and plan["start_time"] == 1544712660.0


async def test_spans_that_cannot_be_placed_are_counted_not_dropped(http: httpx.AsyncClient) -> None:
    rid, aid = await running_attempt(http)
    export = otlp_json(rid, aid, ["kept"])
    export["resourceSpans"] += otlp_json(None, None, ["no-ids"])["resourceSpans"]
    export["resourceSpans"] += otlp_json(rid, "at-missing", ["wrong-attempt", "also"])["resourceSpans"]
    response = await http.post("/v1/traces", json=export)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "3" and "names no agentlightning.rollout_id" in partial["errorMessage"]
    assert "no attempt 'at-missing'" in partial["errorMessage"]
    assert [s["name"] for s in (await http.post(AGL + "/spans/search", json={"rollout_id": rid})).json()["items"]] == [
        "kept"
    ]


async def test_protobuf_answer_and_malformed_exports(http: httpx.AsyncClient) -> None:
    proto = {"content-type": "application/x-protobuf"}
    empty = await http.post("/v1/traces", content=b"", headers=proto)
    assert (
        empty.status_code == 200
        and ExportTraceServiceResponse.FromString(empty.content).partial_success.rejected_spans == 0
    )
    bad = await http.post("/v1/traces", content=b"\xff\xff\xff", headers=proto)
    assert bad.status_code == 400 and bad.json()["code"] == "invalid_otlp"
    bad_hex = otlp_json("ro-1", "at-1", ["x"])
    bad_hex["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz"
    assert (await http.post("/v1/traces", json=bad_hex)).status_code == 400
    assert (
        await http.post("/v1/traces", content=b"[1]", headers={"content-type": "application/json"})
    ).status_code == 400
    text = await http.post("/v1/traces", content=b"x", headers={"content-type": "text/plain"})
    assert text.status_code == 415


async def test_a_gzip_bomb_stops_at_the_limit(http: httpx.AsyncClient) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))  # 64 MiB of zeros in about 64 KiB
    headers = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
    response = await http.post("/v1/traces", content=bomb, headers=headers)
    assert response.status_code == 413 and "decompressed" in response.json()["detail"]


async def test_span_attributes_name_the_attempt_and_its_sequence_id(http: httpx.AsyncClient) -> None:
    rid, aid = await running_attempt(http)
    export = otlp_json("ro-elsewhere", "at-elsewhere", ["mine"])  # the resource names another attempt
    span = export["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    span["attributes"] += [
        {"key": "agentlightning.rollout_id", "value": {"stringValue": rid}},
        {"key": "agentlightning.attempt_id", "value": {"stringValue": aid}},
        {"key": "agentlightning.span_sequence_id", "value": {"stringValue": "40"}},
    ]
    assert (await http.post("/v1/traces", json=export)).json() == {}
    [stored] = (await http.post(AGL + "/spans/search", json={"rollout_id": rid})).json()["items"]
    assert (stored["name"], stored["attempt_id"], stored["sequence_id"]) == ("mine", aid, 40)
    nxt = (await http.post(AGL + "/spans/next", json={"rollout_id": rid, "attempt_id": aid})).json()
    assert nxt["sequence_id"] > 40  # later ids come after one given explicitly
