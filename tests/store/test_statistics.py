"""statistics(): Agent Lightning's counts from one projection query when a projector answers (the server is never
asked for the control stream's subjects), and from narrow subject filters of the log when none does."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from voltbus.services.settings import NatsSettings
from voltbus.store import EnqueueRolloutRequest, Store, connect

from ..conftest import free_port
from .test_store_api import PROMPT, span, started

COUNTS = ("total_rollouts", "total_resources", "total_workers")


@pytest.fixture
async def unprojected(nats_settings: NatsSettings) -> AsyncIterator[Store]:
    """A store of the same namespace whose projector URL answers nothing: its statistics count from the log."""
    store = await connect(settings=nats_settings, projector_url=f"http://127.0.0.1:{free_port()}")
    yield store
    await store.close()


def stream_infos(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every stream info request ``store`` sends from now on and its answer, recorded at the NATS client's edge (its
    ``request``, which nats-py's JetStream context and voltbus's raw API calls both go through)."""
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []
    request = store.log.nc.request

    async def recorded(subject: str, payload: bytes = b"", *args: Any, **kwargs: Any) -> Any:
        msg = await request(subject, payload, *args, **kwargs)
        if subject.startswith("$JS.API.STREAM.INFO."):
            seen.append((json.loads(payload or b"{}"), json.loads(msg.data)))
        return msg

    monkeypatch.setattr(store.log.nc, "request", recorded)
    return seen


def listed(seen: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    """The subjects the recorded stream info answers carried."""
    return [s for _, answer in seen for s in answer["state"].get("subjects") or {}]


async def mixed_log(store: Store) -> None:
    """A bundle with two versions, two rollouts enqueued (one dequeued by w1, one cancelled: a ``.c`` subject), one
    started bypassing the queue (its first event on ``.e``), a second worker, three spans."""
    res = await store.add_resources(PROMPT)
    await store.update_resources(res.resources_id, PROMPT)
    await store.enqueue_rollout("a")
    cancelled = await store.enqueue_rollout("b")
    await store.dequeue_rollout(worker_id="w1")
    await store.cancel_rollout(cancelled.rollout_id)
    rid, aid = await started(store)
    await store.update_worker("w2")
    await store.add_many_spans([span(rid, aid, i, span_id=f"{i:016x}") for i in (1, 2, 3)])


async def test_projected_counts_equal_the_logs_and_no_subject_is_listed(
    queried: Store, unprojected: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mixed_log(queried)
    seen = stream_infos(queried, monkeypatch)
    stats = await queried.statistics()
    assert "projector" not in stats
    assert [stats[k] for k in COUNTS] == [3, 1, 2]  # one bundle with two versions, as Agent Lightning counts ids
    assert (stats["total_attempts"], stats["total_spans"], stats["total_span_events"]) == (2, 3, 3)
    assert seen and all("subjects_filter" not in asked for asked, _ in seen) and listed(seen) == []
    logged = await unprojected.statistics()
    assert "start `voltbus projector`" in logged["projector"]
    assert [logged[k] for k in COUNTS] == [stats[k] for k in COUNTS]
    assert logged["control_events"] == stats["control_events"] and logged["spans_bytes"] == stats["spans_bytes"]


async def test_statistics_on_a_long_log_see_the_callers_writes_without_listing_subjects(
    queried: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Right after enqueueing thousands of rollouts, the projection's count is the log's (read-your-writes), and the
    stream info answers carry no subject: before, they carried every rollout's."""
    for first in range(0, 3000, 1000):
        await queried.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(first, first + 1000)])
    seen = stream_infos(queried, monkeypatch)
    stats = await queried.statistics()
    assert (stats["total_rollouts"], stats["total_attempts"], stats["control_events"]) == (3000, 0, 3000)
    assert listed(seen) == [] and all("subjects_filter" not in asked for asked, _ in seen)


async def test_without_a_projector_the_log_counts_by_narrow_filters(
    unprojected: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fallback lists only the subjects a rollout's first event lands on, the bundles' and the workers': never the
    namespace's ``>`` (a cancel's ``.c`` subject is not sent), and each rollout counts once."""
    await mixed_log(unprojected)
    seen = stream_infos(unprojected, monkeypatch)
    stats = await unprojected.statistics()
    assert [stats[k] for k in COUNTS] == [3, 1, 2] and stats["total_attempts"] is None
    ns = unprojected.topology.namespace
    asked = {a.get("subjects_filter") for a, _ in seen} - {None}
    assert asked == {f"{ns}.ro.*.q", f"{ns}.ro.*.e", f"{ns}.res.*", f"{ns}.wk.*"}
    subjects = listed(seen)
    assert subjects and not [s for s in subjects if s.endswith(".c")] and len(subjects) == len(set(subjects))
