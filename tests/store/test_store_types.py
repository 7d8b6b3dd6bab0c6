"""The store's record types: PaginatedResult behaves as a sequence; records are plain value objects."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from voltbus.store import Attempt, AttemptedRollout, PaginatedResult, Rollout


def test_paginated_result_is_a_sequence_of_its_items() -> None:
    page = PaginatedResult(items=["a", "b", "c"], limit=3, offset=6, total=10)
    assert len(page) == 3
    assert list(page) == ["a", "b", "c"]
    assert page[0] == "a" and page[-1] == "c"
    assert page[1:] == ["b", "c"]
    assert "b" in page and "z" not in page
    assert [x for x in reversed(page.items)] == ["c", "b", "a"]
    assert (page.limit, page.offset, page.total) == (3, 6, 10)


def test_paginated_result_defaults_and_empty() -> None:
    page: PaginatedResult[int] = PaginatedResult(items=[])
    assert len(page) == 0 and list(page) == [] and not page.items
    assert (page.limit, page.offset, page.total) == (-1, 0, 0)


def test_paginated_result_round_trips_as_json() -> None:
    page = PaginatedResult(items=[1, 2], total=5)
    raw = msgspec.json.encode(page)
    assert msgspec.json.decode(raw) == {"items": [1, 2], "limit": -1, "offset": 0, "total": 5}
    assert msgspec.json.decode(raw, type=PaginatedResult[int]) == page


def test_paginated_result_index_errors_like_a_list() -> None:
    page = PaginatedResult(items=[1])
    try:
        page[5]
    except IndexError:
        pass
    else:  # pragma: no cover
        raise AssertionError("expected IndexError")
    assert isinstance(page[0:0], Sequence)


def test_attempted_rollout_is_a_rollout_with_its_attempt() -> None:
    attempt = Attempt(rollout_id="ro-1", attempt_id="at-1", sequence_id=1, start_time=1.0)
    r = AttemptedRollout(rollout_id="ro-1", input={"q": 1}, start_time=1.0, status="preparing", attempt=attempt)
    assert isinstance(r, Rollout) and r.attempt.status == "preparing"
    plain = Rollout(rollout_id="ro-2", input=None, start_time=1.0)
    assert (plain.status, plain.metadata, plain.end_time) == ("queuing", None, None)
    assert msgspec.json.decode(msgspec.json.encode(r), type=AttemptedRollout) == r
