"""Input limits where agents and users send data: each refused (or cut and marked) with a clear answer,
and nothing refused is forwarded or recorded."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.services.gateway import conftest as gateway_fixtures
from tests.services.gateway.conftest import GatewayFactory
from voltbus.cli import app as cli
from voltbus.schemas import RewardReported, SpanRecorded
from voltbus.schemas.errors import InvalidCommand
from voltbus.services.dashboard import app as dashboard_app
from voltbus.services.eventlog import EventLog
from voltbus.services.projector import app as projector_app
from voltbus.services.projector.client import run_sql
from voltbus.services.projector.projector import Projector
from voltbus.services.projector.sql import truncated_to
from voltbus.services.serving import free_port, serving
from voltbus.services.settings import DashboardSettings, NatsSettings, ProjectorSettings, Settings
from voltbus.store import Span, Store, connect

make_gateway, store = gateway_fixtures.make_gateway, gateway_fixtures.store  # the gateway tests' fixtures
LIMITS = dict(
    max_body_bytes=4000, max_messages=3, max_n=2, max_prompt_tokens=8, max_event_bytes=500, max_event_fields=4
)


async def spans_events(eventlog: EventLog) -> list[object]:
    return [e.event async for e in eventlog.replay("spans")]  # type: ignore[union-attr]


async def test_model_calls_past_a_limit_are_refused_and_never_forwarded(make_gateway: GatewayFactory) -> None:
    g = await make_gateway(**LIMITS)
    chat = f"/rollout/{g.rid}/attempt/{g.aid}/v1/chat/completions"
    text = f"/rollout/{g.rid}/attempt/{g.aid}/v1/completions"
    one = [{"role": "user", "content": "2+40"}]
    async with httpx.AsyncClient(base_url=g.url) as http:

        async def refused(path: str, body: dict) -> tuple[int, str, str]:
            answer = await http.post(path, json=body)
            error = answer.json()["error"]
            return answer.status_code, error["type"], error["message"]

        assert (await http.post(chat, json={"model": "m", "messages": one, "n": 2})).status_code == 200
        big = [{"role": "user", "content": "x" * 5000}]
        assert await refused(chat, {"model": "m", "messages": big}) == (
            413,
            "body_too_large",
            "request body over 4000 bytes",
        )
        status, kind, message = await refused(chat, {"model": "m", "messages": one * 4})
        assert (status, kind) == (400, "limit_exceeded") and "4" in message and "gateway.max_messages" in message
        status, kind, message = await refused(chat, {"model": "m", "messages": one, "n": 50})
        assert (status, kind) == (400, "limit_exceeded") and "gateway.max_n" in message
        status, kind, message = await refused(text, {"model": "m", "prompt": list(range(9))})
        assert (status, kind) == (400, "limit_exceeded") and "gateway.max_prompt_tokens" in message
        status, _, _ = await refused(text, {"model": "m", "prompt": [[1, 2, 3, 4], [5, 6, 7, 8], [9]]})
        assert status == 400  # a batch of token-id prompts counts all of them
    assert len(g.engine.received) == 1  # only the call within the limits reached the engine


async def test_events_past_a_limit_are_refused_and_not_recorded(
    make_gateway: GatewayFactory, eventlog: EventLog
) -> None:
    g = await make_gateway(**LIMITS)
    url = f"/api/rollouts/{g.rid}/attempt/{g.aid}/events"
    async with httpx.AsyncClient(base_url=g.url) as http:
        assert (await http.post(url, json={"event_type": "reward", "data": {"value": 1.0}})).status_code == 200
        too_big = await http.post(url, json={"event_type": "note", "data": {"text": "x" * 600}})
        assert too_big.status_code == 413 and "500 bytes" in too_big.json()["error"]["message"]
        fields = {"event_type": "note", "data": {f"k{i}": i for i in range(5)}}
        too_many = await http.post(url, json=fields)
        assert too_many.status_code == 400 and "gateway.max_event_fields" in too_many.json()["error"]["message"]
        dims = {"type": "reward", "value": 1.0, "dimensions": {f"d{i}": 0.1 for i in range(4)}}
        assert (await http.post(url, json=dims)).status_code == 400  # the dimensions count as fields
        long_type = await http.post(url, json={"event_type": "t" * 200, "data": {}})
        assert long_type.status_code == 400 and "event type" in long_type.json()["error"]["message"]
    recorded = await spans_events(eventlog)
    assert [type(e) for e in recorded] == [RewardReported]  # only the accepted post


async def test_oversized_span_attributes_are_cut_and_marked_never_lost(
    nats_settings: NatsSettings, eventlog: EventLog
) -> None:
    small = nats_settings.model_copy(update={"span_value_max_bytes": 1000, "span_max_bytes": 4000})
    async with await connect(settings=small) as client, await connect(settings=nats_settings) as defaults:
        rollout = await client.start_rollout({"q": 1}, mode="train")
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id

        def span(seq: int, attributes: dict) -> Span:
            return Span(rollout_id=rid, attempt_id=aid, sequence_id=seq, trace_id="a" * 32, span_id=f"{seq:016x}",
                        name="tool", attributes=attributes)  # fmt: skip

        await client.add_span(span(1, {"doc": "é" * 900, "ok": "short", "ids": list(range(500))}))
        await client.add_span(span(2, {f"k{i}": "x" * 900 for i in range(10)}))
        await defaults.add_span(span(3, {"doc": "y" * 5 * 1024 * 1024}))  # over the bus's message limit
    by_seq = {e.sequence_id: e for e in await spans_events(eventlog) if isinstance(e, SpanRecorded)}
    first = by_seq[1].attributes
    assert first["ok"] == "short" and first["voltbus.truncated"] == ["doc", "ids"]
    assert str(first["doc"]).endswith("bytes]") and len(str(first["doc"]).encode()) < 1100
    assert str(first["ids"]).startswith("[0,1,2,") and "…[truncated" in str(first["ids"])
    second = by_seq[2].attributes
    assert second["voltbus.dropped_attributes"] == 10 - sum(k.startswith("k") for k in second)
    assert 0 < second["voltbus.dropped_attributes"] < 10
    third = by_seq[3].attributes
    assert len(str(third["doc"])) < 130 * 1024 and str(third["doc"]).endswith("…[truncated 5111808 bytes]")


def test_sql_results_past_the_row_limit_are_refused_or_cut_with_a_message(tmp_path: Path) -> None:
    db = tmp_path / "p.duckdb"
    Projector(db).close()
    settings = Settings(projector=ProjectorSettings(db=db, max_rows=10))
    with pytest.raises(InvalidCommand, match="more than 10 rows"):
        run_sql(settings, "SELECT * FROM range(1000000)", db)
    cut = run_sql(settings, "SELECT * FROM range(1000000)", db, truncate=True)
    assert cut.num_rows == 10 and truncated_to(cut) == 10
    assert truncated_to(run_sql(settings, "SELECT * FROM range(10)", db)) is None  # exactly the limit: whole
    result = CliRunner().invoke(cli, ["sql", "--db", str(db), "--format", "csv", "SELECT * FROM range(50)"],
                                env={"VOLTBUS_PROJECTOR__MAX_ROWS": "10"})  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "truncated to 10 rows (projector.max_rows)" in result.stderr
    assert result.stdout.splitlines()[1:] == [str(i) for i in range(10)]


async def test_the_sql_endpoint_refuses_or_marks_a_result_past_the_row_limit(tmp_path: Path) -> None:
    projector = Projector(tmp_path / "p.duckdb")
    settings = Settings(projector=ProjectorSettings(db=tmp_path / "p.duckdb", max_rows=10))
    endpoint = projector_app.build_app(settings, projector, projector_app.Progress(projector))
    try:
        async with serving(endpoint, free_port(), lifespan="off") as url, httpx.AsyncClient(base_url=url) as http:
            refused = await http.post("/sql", json={"sql": "SELECT * FROM range(100)"})
            assert refused.status_code == 400 and "more than 10 rows" in refused.json()["error"]
            cut = await http.post("/sql", json={"sql": "SELECT * FROM range(100)", "truncate": True})
            assert cut.status_code == 200 and cut.headers["X-Voltbus-Truncated-To"] == "10"
    finally:
        projector.close()


async def test_the_dashboard_refuses_an_overlong_query_parameter() -> None:
    settings = Settings(dashboard=DashboardSettings(projector_url="http://127.0.0.1:9"))
    async with serving(dashboard_app.build_app(settings), free_port()) as url, httpx.AsyncClient(base_url=url) as http:
        for path, name in (("/api/rollout", "rollout_id"), ("/api/run", "run_id")):
            answer = await http.get(path, params={name: "r" * 300})
            assert answer.status_code == 400 and f"{name} is 300 characters long" in answer.json()["error"]
        assert (await http.get("/api/rollout", params={"rollout_id": "ro-1"})).status_code == 503  # no projector


async def test_a_store_client_with_default_limits_records_an_ordinary_span_untouched(
    nats_settings: NatsSettings, eventlog: EventLog, store: Store
) -> None:
    rollout = await store.start_rollout({"q": 1}, mode="train")
    attributes = {"prompt": "p" * 10_000, "tokens": list(range(100)), "ok": True}
    span = Span(rollout_id=rollout.rollout_id, attempt_id=rollout.attempt.attempt_id, sequence_id=1,
                trace_id="a" * 32, span_id="a" * 16, name="llm", attributes=attributes)  # fmt: skip
    await store.add_span(span)
    [recorded] = [e for e in await spans_events(eventlog) if isinstance(e, SpanRecorded)]
    assert recorded.attributes == attributes
