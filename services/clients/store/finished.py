"""The spans of finished rollouts, fetched together: Agent Lightning's algorithms see a batch of rollouts finish, then
query each one's spans in turn; the first such query fetches the spans of every rollout seen finished with it, in
one round trip, and the next ones are answered from that fetch (BENCHMARKS.md, "Agent Lightning's algorithm
pattern": one ``query_spans`` cost the projector more CPU than the whole rest of a rollout)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

FETCH_AT_MOST = 256
"""Rollouts fetched together at most (their spans must fit one answer of the projector: ``projector.max_rows``)."""
NEAR_SPANS = 50_000
"""How far (spans stream positions) from the asked rollout's spans another's may lie to be fetched with it: a batch
that finished together lies within a few thousand; one far away would make the fetch read the stream's whole range
between them (1.5-1.9 s at 1,000,000 rollouts), so it is left for a fetch of its own neighbours."""
KEEP_S = 10.0
"""How long a fetched rollout's spans may answer a query; past it the query goes to the projector again."""
KEEP_AT_MOST = 4096
"""Rollouts remembered (seen finished, or fetched and not yet asked for) at most; the oldest go first."""

Rows = list[dict[str, Any]]


class FinishedSpans:
    """Rollouts a store client saw finished, and the spans fetched for them, each answered once."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.seen: dict[str, None] = {}
        """Rollout ids seen finished whose spans were not fetched yet, oldest first."""
        self.fetched: dict[str, tuple[float, Rows]] = {}
        """Rollout id -> (when fetched, its spans' rows) not yet asked for, oldest first."""

    def saw(self, rollout_ids: list[str]) -> None:
        """Note rollouts seen finished (a read after their end, see ``StoreBase.saw_ended``)."""
        for rid in rollout_ids:
            if rid not in self.fetched:
                self.seen[rid] = None
        _trim(self.seen)

    def knows(self, rollout_id: str) -> bool:
        """Whether a query of ``rollout_id``'s spans may be answered here."""
        return rollout_id in self.seen or rollout_id in self.fetched

    async def rows(self, rollout_id: str, fetch: Callable[[list[str]], Awaitable[Rows]]) -> Rows | None:
        """The spans of ``rollout_id`` (every attempt; the ``latest`` column marks its latest attempt's), once:
        fetched now with every other rollout seen finished, or from an earlier fetch; None when not known here or
        fetched too long ago."""
        now = self.clock()
        for rid in [r for r, (at, _) in self.fetched.items() if now - at > KEEP_S]:
            del self.fetched[rid]
        if rollout_id not in self.fetched:
            if rollout_id not in self.seen:
                return None
            self.seen.pop(rollout_id)
            batch = [rollout_id, *list(self.seen)[: FETCH_AT_MOST - 1]]
            for rid in batch[1:]:
                self.seen.pop(rid)
            by_rollout: dict[str, Rows] = {rid: [] for rid in batch}
            for row in await fetch(batch):
                if row.get("deferred"):  # stored far from the asked one's spans: fetched with its own neighbours
                    del by_rollout[row["rollout_id"]]
                    self.seen[row["rollout_id"]] = None
                else:
                    by_rollout[row["rollout_id"]].append(row)
            at = self.clock()
            for rid, rows in by_rollout.items():
                self.fetched[rid] = (at, rows)
            _trim(self.fetched)
        found = self.fetched.pop(rollout_id, None)
        return None if found is None else found[1]


def _trim(kept: dict[str, Any]) -> None:
    while len(kept) > KEEP_AT_MOST:
        kept.pop(next(iter(kept)))
