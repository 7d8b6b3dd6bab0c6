"""FinishedSpans: which queries a fetch of finished rollouts' spans answers, and for how long (a clock in the test)."""

from __future__ import annotations

from typing import Any

from voltbus.services.clients.store import finished
from voltbus.services.clients.store.finished import FinishedSpans


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_one_fetch_answers_each_rollout_seen_finished_once() -> None:
    fetches: list[list[str]] = []

    async def fetch(ids: list[str]) -> list[dict[str, Any]]:
        fetches.append(ids)
        return [{"rollout_id": rid, "n": n} for rid in ids for n in (1, 2)]

    spans = FinishedSpans(Clock())
    spans.saw(["a", "b", "c"])
    assert await spans.rows("b", fetch) == [{"rollout_id": "b", "n": 1}, {"rollout_id": "b", "n": 2}]
    assert fetches == [["b", "a", "c"]]
    assert await spans.rows("a", fetch) == [{"rollout_id": "a", "n": 1}, {"rollout_id": "a", "n": 2}]
    assert await spans.rows("a", fetch) is None  # answered once; the next query goes to the projector
    assert await spans.rows("unseen", fetch) is None and fetches == [["b", "a", "c"]]


async def test_a_fetch_answers_for_a_while_and_memory_is_bounded(monkeypatch: Any) -> None:
    async def fetch(ids: list[str]) -> list[dict[str, Any]]:
        return [{"rollout_id": rid} for rid in ids]

    clock = Clock()
    spans = FinishedSpans(clock)
    spans.saw(["a", "b"])
    await spans.rows("a", fetch)
    clock.now += finished.KEEP_S + 1
    assert await spans.rows("b", fetch) is None and not spans.knows("b")
    monkeypatch.setattr(finished, "KEEP_AT_MOST", 3)
    spans.saw(["1", "2", "3", "4", "5"])
    assert list(spans.seen) == ["3", "4", "5"]


async def test_a_rollout_deferred_by_the_fetch_is_fetched_with_its_own_neighbours() -> None:
    """The projector leaves out a rollout stored far from the asked one's spans (``deferred``): it is not answered as
    having no spans, and a query of it fetches it again with the other deferred ones."""
    fetches: list[list[str]] = []

    async def fetch(ids: list[str]) -> list[dict[str, Any]]:
        fetches.append(ids)
        far = {"old1", "old2"} if ids[0] not in {"old1", "old2"} else set()
        return [{"rollout_id": rid, "deferred": rid in far} | ({} if rid in far else {"n": 1}) for rid in ids]

    spans = FinishedSpans(Clock())
    spans.saw(["new1", "old1", "new2", "old2"])
    assert await spans.rows("new1", fetch) == [{"rollout_id": "new1", "deferred": False, "n": 1}]
    assert await spans.rows("new2", fetch) == [{"rollout_id": "new2", "deferred": False, "n": 1}]
    assert spans.knows("old1") and spans.knows("old2")
    assert await spans.rows("old2", fetch) == [{"rollout_id": "old2", "deferred": False, "n": 1}]
    assert fetches == [["new1", "old1", "new2", "old2"], ["old2", "old1"]]
    assert await spans.rows("old1", fetch) == [{"rollout_id": "old1", "deferred": False, "n": 1}]
    assert len(fetches) == 2  # old1 came with old2's fetch
