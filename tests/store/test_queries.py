"""The store's query_* methods over a live projector: filters (and/or), sorting, pagination, totals,
and read-your-writes (a query sees what this client just wrote)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.resources import PromptTemplate
from voltbus.services.projector.app import run
from voltbus.services.settings import NatsSettings, ProjectorSettings, Settings
from voltbus.store import EnqueueRolloutRequest, Span, Store, connect

from ..conftest import free_port


@pytest.fixture
async def queried(nats_settings: NatsSettings, tmp_path: Path) -> AsyncIterator[Store]:
    """A store whose queries go to a projector running in this test."""
    port = free_port()
    settings = Settings(nats=nats_settings, projector=ProjectorSettings(db=tmp_path / "p.duckdb", port=port))
    stop, ready = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(run(settings, stop, ready))
    await asyncio.wait_for(ready.wait(), 20)
    store = await connect(settings=nats_settings, projector_url=f"http://127.0.0.1:{port}")
    yield store
    await store.close()
    stop.set()
    await serving


async def setup_rollouts(store: Store) -> list[str]:
    made = await store.enqueue_many_rollouts([EnqueueRolloutRequest(input={"i": i}) for i in range(6)])
    claimed = await store.dequeue_many_rollouts(limit=3, worker_id="w-a")
    await store.update_attempt(claimed[0].rollout_id, claimed[0].attempt.attempt_id, status="succeeded")
    await store.update_attempt(claimed[1].rollout_id, claimed[1].attempt.attempt_id, status="failed")
    return [r.rollout_id for r in made]


async def test_query_rollouts_filters_logic_sort_and_pages(queried: Store) -> None:
    ids = await setup_rollouts(queried)
    everything = await queried.query_rollouts()
    assert everything.total == 6 and [r.rollout_id for r in everything] == ids  # creation order
    running = await queried.query_rollouts(status_in=["preparing"])
    assert [r.rollout_id for r in running] == [ids[2]] and running[0].attempt.worker_id == "w-a"
    both = await queried.query_rollouts(status_in=["succeeded"], rollout_id_in=[ids[5]], filter_logic="or")
    assert {r.rollout_id for r in both} == {ids[0], ids[5]}
    none = await queried.query_rollouts(status_in=["succeeded"], rollout_id_in=[ids[5]], filter_logic="and")
    assert none.total == 0 and list(none) == []
    contains = await queried.query_rollouts(rollout_id_contains=ids[3][-6:])
    assert [r.rollout_id for r in contains] == [ids[3]]
    or_without_filters = await queried.query_rollouts(filter_logic="or")
    assert or_without_filters.total == 6
    page = await queried.query_rollouts(sort_by="rollout_id", sort_order="desc", limit=2, offset=1)
    assert [r.rollout_id for r in page] == sorted(ids, reverse=True)[1:3]
    assert (page.total, page.limit, page.offset) == (6, 2, 1)
    beyond = await queried.query_rollouts(limit=2, offset=10)
    assert beyond.total == 6 and len(beyond) == 0
    with pytest.raises(InvalidCommand, match="cannot sort by 'input'"):
        await queried.query_rollouts(sort_by="input")


async def test_query_attempts_and_read_your_writes(queried: Store) -> None:
    rollout = await queried.start_rollout("x")
    again = await queried.start_attempt(rollout.rollout_id)
    attempts = await queried.query_attempts(rollout.rollout_id)  # sees the attempt it just started
    assert [a.attempt_id for a in attempts] == [rollout.attempt.attempt_id, again.attempt.attempt_id]
    newest_first = await queried.query_attempts(rollout.rollout_id, sort_order="desc", limit=1)
    assert [a.sequence_id for a in newest_first] == [2] and newest_first.total == 2
    assert (await queried.query_attempts("ro-nothing")).total == 0


async def test_query_spans_scope_and_filters(queried: Store) -> None:
    r = await queried.start_rollout("spans")
    first = r.attempt.attempt_id
    second = (await queried.start_attempt(r.rollout_id)).attempt.attempt_id

    def span(attempt: str, n: int, name: str, parent: str | None = None) -> Span:
        return Span(
            rollout_id=r.rollout_id,
            attempt_id=attempt,
            sequence_id=n,
            trace_id=f"{n:032x}",
            span_id=f"{n:016x}",
            parent_id=parent,
            name=name,
            start_time=float(n),
        )

    await queried.add_many_spans(
        [span(first, 1, "agent.run"), span(second, 2, "llm.call", f"{1:016x}"), span(second, 3, "tool.call")]
    )
    assert [s.sequence_id for s in await queried.query_spans(r.rollout_id)] == [1, 2, 3]
    assert [s.sequence_id for s in await queried.query_spans(r.rollout_id, "latest")] == [2, 3]
    assert [s.sequence_id for s in await queried.query_spans(r.rollout_id, first)] == [1]
    assert [s.name for s in await queried.query_spans(r.rollout_id, name_contains="call")] == ["llm.call", "tool.call"]
    either = await queried.query_spans(r.rollout_id, name="agent.run", parent_id=f"{1:016x}", filter_logic="or")
    assert [s.sequence_id for s in either] == [1, 2]
    both = await queried.query_spans(r.rollout_id, name="llm.call", span_id_contains="2")
    assert [s.sequence_id for s in both] == [2] and both[0].parent_id == f"{1:016x}"
    assert (await queried.query_spans(r.rollout_id, limit=1, offset=2, sort_order="desc"))[0].sequence_id == 1


async def test_query_resources_and_workers(queried: Store) -> None:
    a = await queried.add_resources({"p": PromptTemplate(template="v1")})
    await queried.update_resources(a.resources_id, {"p": PromptTemplate(template="v2")})
    b = await queried.add_resources({"p": PromptTemplate(template="other")})
    listed = await queried.query_resources()
    assert [(x.resources_id, x.version) for x in listed] == [(a.resources_id, 2), (b.resources_id, 1)]
    assert listed[0].resources["p"].template == "v2" and listed[0].create_time == a.create_time
    only = await queried.query_resources(resources_id_contains=b.resources_id[-4:])
    assert [x.resources_id for x in only] == [b.resources_id]
    await setup_rollouts(queried)
    await queried.update_worker("w-b", {"cpu_usage_pct": 5.0})
    workers = await queried.query_workers()
    # w-a's last synced attempt failed, so it is idle (as in Agent Lightning); w-b only sent a heartbeat
    assert [(w.worker_id, w.status) for w in workers] == [("w-a", "idle"), ("w-b", "unknown")]
    assert [w.worker_id for w in await queried.query_workers(status_in=["idle"])] == ["w-a"]
    either = await queried.query_workers(status_in=["idle"], worker_id_contains="b", filter_logic="or")
    assert [w.worker_id for w in either] == ["w-a", "w-b"]
    assert (await queried.query_workers(status_in=["idle"], worker_id_contains="b")).total == 0
    assert (await queried.query_workers(worker_id_contains="b"))[0].heartbeat_stats["cpu_usage_pct"] == 5.0
