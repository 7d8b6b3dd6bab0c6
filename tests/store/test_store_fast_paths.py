"""The store's round-trip savers keep the lifecycle's meaning: claims for many workers with one fetch,
and commands decided on a remembered state that another writer has since changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import start_server, wait_for
from voltbus.schemas.errors import InvalidCommand
from voltbus.schemas.resources import PromptTemplate
from voltbus.services.clients.store.resources import LATEST_RECHECK_S
from voltbus.services.settings import NatsSettings
from voltbus.store import Store, connect


async def test_dequeue_for_workers_claims_fifo_one_each(store: Store) -> None:
    rollouts = [await store.enqueue_rollout({"i": i}) for i in range(3)]
    got = await store.dequeue_for_workers(["w1", "w2", "w3", "w4", "w5"], report_empty=["w5"])
    assert [got[w].rollout_id for w in ("w1", "w2", "w3")] == [r.rollout_id for r in rollouts]
    assert set(got) == {"w1", "w2", "w3"}
    for w in ("w1", "w2", "w3"):
        worker = await store.get_worker_by_id(w)
        assert worker is not None and worker.status == "busy" and worker.current_attempt_id == got[w].attempt.attempt_id
        assert got[w].attempt.worker_id == w and got[w].status == "preparing"
    assert await store.get_worker_by_id("w4") is None  # not in report_empty: nothing written
    idle = await store.get_worker_by_id("w5")
    assert idle is not None and idle.status == "idle"
    assert await store.dequeue_for_workers(["w4"]) == {}


async def test_a_claim_for_workers_that_start_at_once_opens_the_attempt_running(store: Store) -> None:
    rollout = await store.enqueue_rollout({"i": 1})
    before = (await store.log.js.stream_info(store.topology.control_stream)).state.last_seq
    got = await store.dequeue_for_workers(["w1"], start=True)
    attempt = got["w1"].attempt
    assert (got["w1"].status, attempt.status, attempt.last_heartbeat_time) == ("running", "running", attempt.start_time)
    stored = await store.get_rollout_by_id(rollout.rollout_id)
    assert stored is not None and stored.status == "running"
    kinds = [type(e.event).__name__ async for e in store.log.replay("control", from_seq=before + 1)]
    assert kinds == ["AttemptClaimed", "WorkerStatusReported"]  # no AttemptStarted of its own
    worker = await store.get_worker_by_id("w1")
    assert worker is not None and worker.status == "busy" and worker.current_attempt_id == attempt.attempt_id
    done = await store.finish_attempt(rollout.rollout_id, attempt.attempt_id, worker_id="w1")
    assert done.status == "succeeded"


async def test_remembered_state_yields_to_another_writer(store: Store, nats_settings: NatsSettings) -> None:
    first = await store.enqueue_rollout("kept")
    second = await store.enqueue_rollout("cancelled behind our back")
    claims = await store.dequeue_for_workers(["w1", "w2"])
    other = await connect(settings=nats_settings)
    try:  # another client moves both rollouts on after this client remembered their states
        await other.update_rollout(first.rollout_id, metadata={"by": "other"})
        await other.cancel_rollout(second.rollout_id, reason="test")
    finally:
        await other.close()
    done = await store.finish_attempt(first.rollout_id, claims["w1"].attempt.attempt_id, worker_id="w1")
    assert done.status == "succeeded"
    final = await store.get_rollout_by_id(first.rollout_id)
    assert final is not None and final.status == "succeeded" and final.metadata == {"by": "other"}
    with pytest.raises(InvalidCommand):  # decided on the stored history, not on the remembered state
        await store.finish_attempt(second.rollout_id, claims["w2"].attempt.attempt_id, worker_id="w2")
    cancelled = await store.get_rollout_by_id(second.rollout_id)
    assert cancelled is not None and cancelled.status == "cancelled"


async def test_enqueue_follows_the_latest_resources_without_reading(store: Store, nats_settings: NatsSettings) -> None:
    first = await store.add_resources({"p": PromptTemplate(template="one {x}", engine="f-string")})
    assert (await store.enqueue_rollout("a")).resources_id == f"{first.resources_id}:1"
    mine = await store.update_resources(
        first.resources_id, {"p": PromptTemplate(template="two {x}", engine="f-string")}
    )
    assert (await store.enqueue_rollout("b")).resources_id == f"{mine.resources_id}:2"  # its own write, at once
    other = await connect(settings=nats_settings)
    try:
        theirs = await other.add_resources({"p": PromptTemplate(template="three {x}", engine="f-string")})
    finally:
        await other.close()
    want = f"{theirs.resources_id}:1"

    async def follows() -> bool:
        return (await store._latest_resources_id()) == want

    await wait_for(follows, timeout=5, what="the other client's version")
    assert (await store.enqueue_rollout("c")).resources_id == want
    latest = await store.get_latest_resources()
    assert latest is not None and latest.resources_id == theirs.resources_id


class _Fetcher:
    """A pull subscription whose fetch, like nats-py's, may hand over more messages than asked for."""

    def __init__(self, batches: list[list[str]]) -> None:
        self.batches, self.calls = batches, 0

    async def fetch(self, n: int, timeout: float) -> list[str]:
        self.calls += 1
        return self.batches.pop(0)


async def test_dispatch_messages_past_the_batch_are_kept_for_the_next_claim(store: Store) -> None:
    sub = _Fetcher([["m1", "m2", "m3"], ["m4"]])
    assert await store._fetch_dispatch(sub, 1) == ["m1"]  # type: ignore[arg-type]
    assert await store._fetch_dispatch(sub, 1) == ["m2"]  # type: ignore[arg-type]
    assert await store._fetch_dispatch(sub, 5) == ["m3"]  # type: ignore[arg-type]
    assert sub.calls == 1  # the spare ones came first, without a fetch
    assert await store._fetch_dispatch(sub, 5) == ["m4"]  # type: ignore[arg-type]
    assert sub.calls == 2


@pytest.mark.timeout(60)
async def test_the_latest_resources_are_caught_up_after_a_server_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path / "nats")  # a restart loses the watch's ordered consumer (server memory)
    settings = NatsSettings(url=server.url, namespace="latest", request_timeout_s=2.0)
    store, other = await connect(settings=settings), None
    try:
        first = await store.add_resources({"p": PromptTemplate(template="one {x}", engine="f-string")})
        assert (await store.enqueue_rollout("a")).resources_id == f"{first.resources_id}:1"
        server.kill()
        server.start()
        other = await connect(settings=settings)
        theirs = await other.add_resources({"p": PromptTemplate(template="two {x}", engine="f-string")})
        want = f"{theirs.resources_id}:1"

        async def follows() -> bool:
            try:
                return (await store._latest_resources_id()) == want
            except Exception:  # noqa: BLE001 - the client is still reconnecting
                return False

        await wait_for(follows, timeout=5 * LATEST_RECHECK_S, what="the new version after the restart", every=0.2)
        # (without the re-read: ~20 s here, until nats-py resets the ordered consumer on its own)
    finally:
        for client in (store, other):
            if client is not None:
                await client.close()
        server.stop()


async def test_a_late_busy_report_never_outlives_the_attempt(store: Store) -> None:
    first = await store.enqueue_rollout({"i": 1})
    got = await store.dequeue_for_workers(["w1"], start=True, report_claims=False)
    assert await store.get_worker_by_id("w1") is None  # not reported at the claim
    await store.report_worker_busy("w1", first.rollout_id)
    busy = await store.get_worker_by_id("w1")
    assert busy is not None and (busy.status, busy.current_rollout_id) == ("busy", first.rollout_id)
    await store.finish_attempt(first.rollout_id, got["w1"].attempt.attempt_id, worker_id="w1")
    await store.report_worker_busy("w1", first.rollout_id)  # the timer fired as the attempt ended
    idle = await store.get_worker_by_id("w1")
    assert idle is not None and (idle.status, idle.current_attempt_id) == ("idle", None)
