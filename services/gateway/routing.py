"""Which engine serves a call: sticky by rollout, healthy first, and a short cool-down after a failure.

Pure logic, no I/O: the clock is passed in, so it is easy to test and to reason about.

* **Sticky routing**: a call that names a rollout goes to the engine with the highest
  rendezvous score ``hash(rollout_id, engine)`` (a stable hash: blake2b, never Python's salted
  ``hash``). Every call of one rollout hits the same engine while that engine is healthy, which
  keeps the engine's prefix cache warm; rollouts spread evenly over the engines; adding or
  removing an engine moves only the rollouts that hashed to it; and when the preferred engine is
  down the rollout's next choice is again the same for every one of its calls.
* **Unattributed calls** (no rollout) are spread **round robin**.
* **Health**: an engine that failed (transport error, timeout, 408, 429, 5xx) is *down* for
  ``cooldown_s`` and tried only after every engine that is up; any answer that is not a failure
  marks it up again at once. An engine that is down is still a last resort, so a gateway whose
  engines are all down keeps trying rather than refusing calls for the cool-down.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from typing import Any


def score(key: str, engine: str) -> int:
    """The stable rendezvous score of ``engine`` for ``key`` (same inputs, same score, any process).

    >>> score("ro-1", "http://a/v1") == score("ro-1", "http://a/v1")
    True
    >>> score("ro-1", "http://a/v1") != score("ro-1", "http://b/v1")
    True
    """
    digest = hashlib.blake2b(f"{key}\x00{engine}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def preference(key: str, engines: list[str]) -> list[int]:
    """Engine indexes in ``key``'s order of preference (highest rendezvous score first).

    >>> engines = ["http://a/v1", "http://b/v1", "http://c/v1"]
    >>> preference("ro-1", engines) == preference("ro-1", engines)
    True
    >>> sorted(preference("ro-1", engines))
    [0, 1, 2]
    >>> firsts = {preference(f"ro-{n}", engines)[0] for n in range(50)}
    >>> firsts == {0, 1, 2}
    True
    """
    return sorted(range(len(engines)), key=lambda i: score(key, engines[i]), reverse=True)


@dataclass
class EngineHealth:
    """What the gateway knows of one engine from the calls it served."""

    url: str
    down_until: float = 0.0
    """Monotonic time before which the engine is skipped (0: up)."""
    failures: int = 0
    """Failures in a row."""
    last_error: str = ""
    """Why it last failed."""

    def up(self, now: float) -> bool:
        """Whether the engine is tried before the engines that are down."""
        return now >= self.down_until


class Router:
    """The engines, their health, and the order in which a call tries them.

    >>> r = Router(["http://a/v1", "http://b/v1"], cooldown_s=5.0)
    >>> first = r.order("ro-1", now=0.0)[0]
    >>> all(r.order("ro-1", now=0.0)[0] == first for _ in range(10))  # sticky
    True
    >>> r.failed(first, "503", now=0.0)
    >>> r.order("ro-1", now=1.0)[0] != first  # down: the other engine serves
    True
    >>> r.order("ro-1", now=6.0)[0] == first  # cool-down over: back to the sticky choice
    True
    >>> [r.order(None, now=9.0)[0] for _ in range(4)]  # unattributed: round robin
    [0, 1, 0, 1]
    >>> r.snapshot(now=1.0)[first]["state"]
    'down'
    """

    def __init__(self, engines: list[str], cooldown_s: float) -> None:
        if not engines:
            raise ValueError("at least one engine URL is needed")
        self.engines = [e.rstrip("/") for e in engines]
        self.cooldown_s = cooldown_s
        self.health = [EngineHealth(url) for url in self.engines]
        self._turn = itertools.count()

    def order(self, key: str | None, now: float) -> list[int]:
        """Every engine, in the order a call should try them: up ones first, each group by preference.

        ``key`` is the rollout id (sticky), or None for round robin.
        """
        n = len(self.engines)
        if key is None:
            start = next(self._turn) % n
            pref = [(start + i) % n for i in range(n)]
        else:
            pref = preference(key, self.engines) if n > 1 else [0]
        return [i for i in pref if self.health[i].up(now)] + [i for i in pref if not self.health[i].up(now)]

    def pick(self, order: list[int], tries: dict[int, int]) -> int:
        """The next engine of ``order`` to try: the first one this call has tried least often.

        >>> Router(["a", "b"], 1.0).pick([1, 0], {1: 1})
        0
        >>> Router(["a", "b"], 1.0).pick([1, 0], {1: 1, 0: 1})
        1
        """
        least = min(tries.get(i, 0) for i in order)
        return next(i for i in order if tries.get(i, 0) == least)

    def failed(self, index: int, error: str, now: float) -> None:
        """Mark an engine down for the cool-down."""
        h = self.health[index]
        h.down_until, h.failures, h.last_error = now + self.cooldown_s, h.failures + 1, error

    def succeeded(self, index: int) -> None:
        """Mark an engine up (it answered)."""
        h = self.health[index]
        h.down_until, h.failures = 0.0, 0

    def snapshot(self, now: float) -> list[dict[str, Any]]:
        """The health view: per engine its URL, ``up``/``down``, seconds left down, failures, last error."""
        return [
            {
                "url": h.url,
                "state": "up" if h.up(now) else "down",
                "down_for_s": round(max(0.0, h.down_until - now), 3),
                "failures": h.failures,
                "last_error": h.last_error,
            }
            for h in self.health
        ]
