"""The store's query_* methods over a live projector: filters (and/or), sorting, pagination, totals,
and read-your-writes (a query sees what this client just wrote, or fails at its deadline)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from operator import attrgetter
from pathlib import Path
from typing import Any, TypeVar

import pytest

from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.resources import PromptTemplate
from voltbus.services.clients.store.queries import SORTABLE, ProjectorUnavailable
from voltbus.services.settings import NatsSettings
from voltbus.store import AttemptedRollout, EnqueueRolloutRequest, Span, Store, connect

from ..conftest import free_port
from .conftest import projector

T = TypeVar("T")


def in_sql_order(items: list[T], key: Callable[[T], Any], order: str) -> list[T]:
    """``items`` (given in tie-break order) as ``ORDER BY key <order> NULLS LAST, <tie-break>`` puts them."""
    present = sorted((x for x in items if key(x) is not None), key=key, reverse=order == "desc")
    return present + [x for x in items if key(x) is None]


def sort_cases(query: str) -> list[tuple[str, str]]:
    """Every (sort_by, sort_order) a query allows."""
    return [(field, order) for field in SORTABLE[query] for order in ("asc", "desc")]


async def check_every_sort(
    query: Callable[..., Awaitable[Any]],
    name: str,
    items: list[T],
    ident: Callable[[T], str],
    keys: dict[str, Callable[[T], Any]] | None = None,
) -> None:
    """``query`` (the store method ``name``) sorted by each field both ways returns ``items`` (given in tie-break
    order) as SQL orders them; ``keys``: a field's value where it is not the item's attribute of that name."""
    for field, order in sort_cases(name):
        key = (keys or {}).get(field, attrgetter(field))
        got = await query(sort_by=field, sort_order=order)
        assert [ident(x) for x in got] == [ident(x) for x in in_sql_order(items, key, order)], (field, order)


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
    # the shortest tail of b's id that a's id does not contain (ids share their leading time digits)
    tail = next(
        b.resources_id[-n:] for n in range(4, len(b.resources_id) + 1) if b.resources_id[-n:] not in a.resources_id
    )
    only = await queried.query_resources(resources_id_contains=tail)
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


async def varied_rollouts(store: Store) -> dict[str, int]:
    """Four rollouts that differ in every sortable field (with nulls); returns each one's attempt count."""
    two = await store.start_rollout("a", mode="train", resources_id="rs-2")
    await store.start_attempt(two.rollout_id)
    queued = await store.enqueue_rollout("b", mode="val", resources_id="rs-1")
    done = await store.start_rollout("c")
    await store.update_attempt(done.rollout_id, done.attempt.attempt_id, status="succeeded")
    failed = await store.start_rollout("d", mode="test", resources_id="rs-3")
    await store.update_attempt(failed.rollout_id, failed.attempt.attempt_id, status="failed")
    return {two.rollout_id: 2, queued.rollout_id: 0, done.rollout_id: 1, failed.rollout_id: 1}


async def test_query_rollouts_sorts_by_every_sortable_field_both_ways(queried: Store) -> None:
    attempts = await varied_rollouts(queried)
    by_id = list(await queried.query_rollouts(sort_by="rollout_id"))  # the tie-break order
    assert [r.rollout_id for r in by_id] == sorted(attempts)
    count = {"attempt_count": lambda r: attempts[r.rollout_id]}
    await check_every_sort(queried.query_rollouts, "query_rollouts", by_id, attrgetter("rollout_id"), count)


async def test_query_attempts_offset(queried: Store) -> None:
    r = await queried.start_rollout("offset")
    for _ in range(3):
        await queried.start_attempt(r.rollout_id)
    every = [a.attempt_id for a in await queried.query_attempts(r.rollout_id)]
    rest = await queried.query_attempts(r.rollout_id, offset=1)
    assert [a.attempt_id for a in rest] == every[1:] and (rest.total, rest.offset, rest.limit) == (4, 1, -1)
    middle = await queried.query_attempts(r.rollout_id, sort_order="desc", limit=2, offset=1)
    assert [a.attempt_id for a in middle] == every[::-1][1:3] and middle.total == 4
    assert len(await queried.query_attempts(r.rollout_id, offset=4)) == 0


ALPHA, BETA = "ab" + "0" * 30, "cd" + "0" * 30
"""Two trace ids."""


def sp(n: int) -> str:
    """Span n's id, ``00000000000000e<n>``: "e" is in every span id, "e<n>" only in span n's."""
    return f"{0xE0 + n:016x}"


def traced(r: AttemptedRollout, attempt_id: str, n: int, trace: str, parent: int | None, ends: bool) -> Span:
    """Span n (sequence id n) of an attempt, started at a time out of step with n."""
    return Span(
        rollout_id=r.rollout_id,
        attempt_id=attempt_id,
        sequence_id=n,
        trace_id=trace,
        span_id=sp(n),
        parent_id=None if parent is None else sp(parent),
        name="llm.call" if n % 2 else "tool.call",
        start_time=float((3 * n) % 5),
        end_time=10.0 - n if ends else None,
    )


async def add_traced_spans(store: Store) -> tuple[AttemptedRollout, list[Span]]:
    """Two traces over two attempts, added out of sequence-id order; returns the spans in the order added."""
    r = await store.start_rollout("traced")
    second = (await store.start_attempt(r.rollout_id)).attempt.attempt_id
    first = r.attempt.attempt_id
    spans = [
        traced(r, first, 2, ALPHA, 1, ends=False),
        traced(r, first, 1, ALPHA, None, ends=True),
        traced(r, second, 4, BETA, 3, ends=True),
        traced(r, second, 3, BETA, 1, ends=False),
    ]
    await store.add_many_spans(spans)
    return r, spans


async def test_query_spans_trace_span_and_parent_filters(queried: Store) -> None:
    r, _ = await add_traced_spans(queried)

    async def ids(**filters: Any) -> set[str]:
        return {s.span_id for s in await queried.query_spans(r.rollout_id, **filters)}

    assert await ids(trace_id=ALPHA) == {sp(1), sp(2)}
    assert await ids(trace_id=ALPHA[:2]) == set()  # exact, not a prefix
    assert await ids(trace_id_contains=BETA[:2]) == {sp(3), sp(4)}
    assert await ids(span_id=sp(3)) == {sp(3)}
    assert await ids(span_id=sp(3)[-2:]) == set()
    assert await ids(parent_id=sp(3)) == {sp(4)}
    assert await ids(parent_id_contains="e1") == {sp(2), sp(3)}
    assert await ids(parent_id_contains="e") == {sp(2), sp(3), sp(4)}  # a root span has no parent to match
    assert await ids(trace_id=ALPHA, parent_id_contains="e3", filter_logic="or") == {sp(1), sp(2), sp(4)}
    assert await ids(trace_id=ALPHA, parent_id_contains="e3") == set()


async def test_query_spans_total_of_a_page(queried: Store) -> None:
    r, _ = await add_traced_spans(queried)
    page = await queried.query_spans(r.rollout_id, limit=2, offset=1)
    assert [s.sequence_id for s in page] == [2, 3] and (page.total, page.limit, page.offset) == (4, 2, 1)
    filtered = await queried.query_spans(r.rollout_id, parent_id_contains="e", limit=1)
    assert len(filtered) == 1 and filtered.total == 3
    assert (await queried.query_spans(r.rollout_id, "latest", limit=1, offset=5)).total == 2


async def test_query_spans_sorts_by_every_sortable_field_both_ways(queried: Store) -> None:
    r, added = await add_traced_spans(queried)
    position = {s.span_id: i for i, s in enumerate(added)}  # seq, the stream order, is the tie-break
    spans = functools.partial(queried.query_spans, r.rollout_id)
    seq = {"seq": lambda s: position[s.span_id]}
    await check_every_sort(spans, "query_spans", added, attrgetter("span_id"), seq)
    with pytest.raises(InvalidCommand, match="cannot sort by 'attributes'"):
        await queried.query_spans(r.rollout_id, sort_by="attributes")


async def test_query_resources_exact_id_sort_and_pages(queried: Store) -> None:
    a = await queried.add_resources({"p": PromptTemplate(template="a1")})
    b = await queried.add_resources({"p": PromptTemplate(template="b1")})
    await queried.update_resources(a.resources_id, {"p": PromptTemplate(template="a2")})
    c = await queried.add_resources({"p": PromptTemplate(template="c1")})
    every = await queried.query_resources()  # creation order, as Agent Lightning's insertion order
    assert [x.resources_id for x in every] == [a.resources_id, b.resources_id, c.resources_id]
    assert [x.resources_id for x in await queried.query_resources(resources_id=b.resources_id)] == [b.resources_id]
    assert (await queried.query_resources(resources_id=b.resources_id[:-1])).total == 0  # exact, not a prefix
    both = await queried.query_resources(resources_id=a.resources_id, resources_id_contains=b.resources_id)
    assert both.total == 0  # the two filters are ANDed
    by_id = sorted(every, key=attrgetter("resources_id"))
    await check_every_sort(queried.query_resources, "query_resources", by_id, attrgetter("resources_id"))
    page = await queried.query_resources(sort_by="update_time", sort_order="desc", limit=2, offset=1)
    newest_first = in_sql_order(by_id, attrgetter("update_time"), "desc")
    assert [x.resources_id for x in page] == [x.resources_id for x in newest_first[1:3]]
    assert (page.total, page.limit, page.offset) == (3, 2, 1)


async def varied_workers(store: Store) -> None:
    """Four workers: busy by a direct start, busy by a claim, idle after a success, heartbeat only."""
    await store.start_rollout("busy", worker_id="w-b")
    await store.enqueue_rollout("claimed")
    assert await store.dequeue_rollout(worker_id="w-d") is not None
    done = await store.start_rollout("done", worker_id="w-a")
    await store.update_attempt(done.rollout_id, done.attempt.attempt_id, status="succeeded")
    await store.update_worker("w-c", {"cpu_usage_pct": 1.0})


async def test_query_workers_sort_and_pages(queried: Store) -> None:
    await varied_workers(queried)
    by_id = list(await queried.query_workers())
    assert [w.worker_id for w in by_id] == ["w-a", "w-b", "w-c", "w-d"]
    await check_every_sort(queried.query_workers, "query_workers", by_id, attrgetter("worker_id"))
    page = await queried.query_workers(sort_by="last_busy_time", sort_order="desc", limit=2, offset=1)
    busiest = in_sql_order(by_id, attrgetter("last_busy_time"), "desc")
    assert [w.worker_id for w in page] == [w.worker_id for w in busiest[1:3]] and page.total == 4
    busy = await queried.query_workers(status_in=["busy"], limit=1, offset=1)
    assert [w.worker_id for w in busy] == ["w-d"] and busy.total == 2


async def test_queries_see_this_clients_last_write(queried: Store) -> None:
    r = await queried.start_rollout("ryw")
    for n in range(1, 6):  # each query right after its write: no wait but the client's own
        await queried.add_span(traced(r, r.attempt.attempt_id, n, ALPHA, None, ends=True))
        assert (await queried.query_spans(r.rollout_id)).total == n
        await queried.update_worker("w-ryw", {"cpu_usage_pct": float(n)})
        [worker] = await queried.query_workers(worker_id_contains="ryw")
        assert worker.heartbeat_stats is not None and worker.heartbeat_stats["cpu_usage_pct"] == n


async def test_queries_after_a_rollout_is_seen_finished_see_its_end_and_every_span(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    """Agent Lightning's algorithms wait for rollouts (or poll them), then query their spans and attempts. The worker
    is another client, and the projector applies the log in batches of 3 s, so it lags behind what the log says."""
    async with projector(nats_settings, tmp_path / "p.duckdb", max_wait_s=3.0) as url:
        worker = await connect(settings=nats_settings)
        readers = [await connect(settings=nats_settings, projector_url=url) for _ in range(3)]
        try:
            ended = []
            for n in range(3):
                r = await worker.start_rollout(f"seen-{n}")
                await worker.add_many_spans([traced(r, r.attempt.attempt_id, i, ALPHA, None, True) for i in (1, 2, 3)])
                await worker.update_attempt(r.rollout_id, r.attempt.attempt_id, status="succeeded")
                ended.append(r.rollout_id)
            waited, polled, queried = readers
            [done] = await waited.wait_for_rollouts(rollout_ids=[ended[0]], timeout=30)
            assert done.status == "succeeded"
            got = await polled.get_rollout_by_id(ended[1])
            assert got is not None and got.status == "succeeded"
            for reader, rid in zip(readers, ended, strict=True):
                if reader is queried:  # the projection itself says the rollout ended; the spans stream may lag
                    await until(
                        lambda rid=rid: rollout_statuses(queried, rid), lambda s: s == ["succeeded"], deadline=30
                    )
                assert (await reader.query_spans(rid, "latest")).total == 3
                [attempt] = await reader.query_attempts(rid)
                assert attempt.status == "succeeded"
        finally:
            for client in (worker, *readers):
                await client.close()


async def rollout_statuses(store: Store, rollout_id: str) -> list[str]:
    """The status of ``rollout_id`` as the projection has it ([] before it has the rollout)."""
    return [r.status for r in await store.query_rollouts(rollout_id_in=[rollout_id])]


async def until(check: Callable[[], Awaitable[T]], ok: Callable[[T], bool], deadline: float) -> T:
    """Call ``check`` until ``ok`` holds for its answer; fail at the deadline (seconds)."""
    give_up = time.monotonic() + deadline
    while not ok(answer := await check()):
        assert time.monotonic() < give_up, f"still {answer!r} after {deadline} s"
        await asyncio.sleep(0.05)
    return answer


async def test_query_fails_at_its_deadline_when_the_projector_never_gets_there(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    elsewhere = nats_settings.model_copy(update={"namespace": nats_settings.namespace + "x"})
    hasty = nats_settings.model_copy(update={"query_timeout_s": 0.5})
    async with projector(elsewhere, tmp_path / "p.duckdb") as url:  # follows another namespace's log
        store = await connect(settings=hasty, projector_url=url)
        try:
            await store.start_rollout("never seen")
            started = time.monotonic()
            with pytest.raises(ProjectorUnavailable, match=r"did not apply this client's writes within 0\.5 s"):
                await store.query_rollouts()
            assert 0.5 <= time.monotonic() - started < 10
        finally:
            await store.close()


async def test_query_without_a_projector_fails_at_once(nats_settings: NatsSettings) -> None:
    store = await connect(settings=nats_settings, projector_url=f"http://127.0.0.1:{free_port()}")
    try:
        started = time.monotonic()
        with pytest.raises(ProjectorUnavailable, match="start `voltbus projector`"):
            await store.query_workers()
        assert time.monotonic() - started < 10
    finally:
        await store.close()


async def test_queries_find_the_projector_at_the_configured_url(
    nats_settings: NatsSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("VOLTBUS_PROJECTOR__URL", url)
    store = await connect(settings=nats_settings)
    try:
        assert store.projector_url == url
        with pytest.raises(ProjectorUnavailable, match=f"no projector answers at {url}/sql"):
            await store.query_rollouts()
    finally:
        await store.close()
    monkeypatch.delenv("VOLTBUS_PROJECTOR__URL")
    default = await connect(settings=nats_settings, projector_url=None)
    try:
        assert default.projector_url == "http://127.0.0.1:8765"
    finally:
        await default.close()


async def test_heartbeat_stats_keep_every_key_as_agent_lightning_does(queried: Store) -> None:
    """Agent Lightning's heartbeat stats are a free dict: keys that are not voltbus's host fields are kept too."""
    stats = {"cpu_cores": 4, "queue_depth": 7, "gpu_kind": "none", "nested": {"a": [1, 2]}}
    beat = await queried.update_worker("w-free", heartbeat_stats=stats)
    assert beat.heartbeat_stats is not None
    assert {k: beat.heartbeat_stats[k] for k in stats} == stats and "extra" not in beat.heartbeat_stats
    read = await queried.get_worker_by_id("w-free")
    assert read is not None and read.heartbeat_stats == beat.heartbeat_stats
    [queried_worker] = await queried.query_workers(worker_id_contains="w-free")
    assert queried_worker.heartbeat_stats == beat.heartbeat_stats


async def test_statistics_count_attempts_and_spans_as_agent_lightning_does(queried: Store) -> None:
    empty = await queried.statistics()
    assert (empty["total_attempts"], empty["total_spans"]) == (0, 0)
    r = await queried.start_rollout("counted")
    await queried.start_attempt(r.rollout_id)
    await queried.add_many_spans([traced(r, r.attempt.attempt_id, n, ALPHA, None, True) for n in (1, 2, 3)])
    await queried.heartbeat(r.rollout_id, r.attempt.attempt_id, "w1")  # a span event, not a span
    stats = await queried.statistics()
    assert (stats["total_rollouts"], stats["total_attempts"], stats["total_spans"]) == (1, 2, 3)
    assert stats["total_span_events"] == 4


async def test_statistics_without_a_projector_say_why_two_counts_are_missing(nats_settings: NatsSettings) -> None:
    store = await connect(settings=nats_settings, projector_url=f"http://127.0.0.1:{free_port()}")
    try:
        await store.enqueue_rollout("alone")
        stats = await store.statistics()
        assert stats["total_rollouts"] == 1 and stats["total_attempts"] is None and stats["total_spans"] is None
        assert "start `voltbus projector`" in stats["projector"]
    finally:
        await store.close()


async def test_spans_of_rollouts_seen_finished_are_fetched_together_and_match_one_query_each(
    nats_settings: NatsSettings, tmp_path: Path
) -> None:
    """Agent Lightning's algorithms query the spans of each finished rollout in turn: the first query fetches those of
    every rollout seen finished with it, and each answer is what a query of that rollout alone gives."""
    async with projector(nats_settings, tmp_path / "p.duckdb") as url:
        worker = await connect(settings=nats_settings)
        reader, alone = [await connect(settings=nats_settings, projector_url=url) for _ in range(2)]
        try:
            ids = []
            for n in range(4):
                r = await worker.start_rollout(f"batched-{n}")
                attempts = [r.attempt.attempt_id]
                if n == 1:  # a second attempt: "latest" leaves out the first one's spans
                    attempts.append((await worker.start_attempt(r.rollout_id)).attempt.attempt_id)
                spans = [traced(r, a, 10 * i + k, ALPHA, None, True) for i, a in enumerate(attempts) for k in (2, 1)]
                await worker.add_many_spans(spans)
                await worker.update_attempt(r.rollout_id, attempts[-1], status="succeeded")
                ids.append(r.rollout_id)
            assert len(await reader.wait_for_rollouts(rollout_ids=ids, timeout=30)) == 4
            first = await reader.query_spans(ids[0], "latest")
            assert set(reader.finished.fetched) == set(ids[1:])  # one fetch for all four
            answers = [first] + [await reader.query_spans(rid, "latest") for rid in ids[1:]]
            everything = await reader.query_spans(ids[1])  # asked again: from the projector, every attempt
            assert not reader.finished.fetched
            await alone.wait_for_rollouts(rollout_ids=ids[:1], timeout=30)  # its queries wait for the same ends
            for rid, got in zip(ids, answers, strict=True):
                assert got.items == (await alone.query_spans(rid, "latest")).items and got.total == len(got.items)
            assert [s.sequence_id for s in answers[1].items] == [11, 12]
            assert [s.sequence_id for s in everything.items] == [1, 2, 11, 12]
            assert (await reader.query_spans(ids[2], "latest", name="none")).total == 0  # a filter: never from a fetch
        finally:
            for client in (worker, reader, alone):
                await client.close()
