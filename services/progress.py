"""Progress of long work for people: done/total, rate and ETA, at most one line a second, and one
summary line at the end. Every long command (replay, reproject, export, backup, restore) says it
the same way."""

from __future__ import annotations

import time
from collections.abc import Callable

Say = Callable[[str], None]


class Meter:
    """Counts work done towards ``total`` ``unit`` (``scale``: units per counted item, e.g. 1e6 bytes
    per MB). With ``upper_bound`` the total is only a bound (a compressed snapshot): the line says so
    and the ETA is a most."""

    def __init__(
        self, label: str, total: float, say: Say, unit: str = "", scale: float = 1.0,
        upper_bound: bool = False, every: float = 1.0,
    ) -> None:  # fmt: skip
        self.label, self.total, self.say, self.unit, self.scale = label, total, say, unit, scale
        self.upper_bound, self.every = upper_bound, every
        self.done = 0.0
        self.started = self.last_said = time.monotonic()

    def add(self, n: float) -> None:
        """Count ``n`` more; print a line if ``every`` seconds have passed since the last one."""
        self.done += n
        if time.monotonic() - self.last_said >= self.every:
            self.last_said = time.monotonic()
            self.say(self.line())

    def _num(self, value: float) -> str:
        return f"{value / self.scale:,.1f}" if self.scale != 1.0 else f"{value:,.0f}"

    def line(self) -> str:
        """The progress line as of now.

        >>> m = Meter("restore", 4_000_000, print, unit="MB", scale=1e6)
        >>> m.done, m.started = 1_000_000, m.started - 2
        >>> m.line()
        'restore: 1.0/4.0 MB, 0.5 MB/s, ETA 6s'
        >>> m = Meter("replay", 1000, print, unit="events")
        >>> m.done, m.started = 250, m.started - 5
        >>> m.line()
        'replay: 250/1,000 events, 50/s, ETA 15s'
        """
        rate = self.done / max(self.elapsed(), 1e-9)
        eta = max(self.total - self.done, 0) / rate if rate else 0.0
        unit = f" {self.unit}" if self.unit else ""
        speed = f"{self._num(rate)}{unit}/s" if self.scale != 1.0 else f"{rate:,.0f}/s"
        if self.upper_bound:
            done, total = self._num(self.done), self._num(self.total)
            return f"{self.label}: {done}{unit} written (of at most {total}), {speed}, ETA <{eta:,.0f}s"
        return f"{self.label}: {self._num(self.done)}/{self._num(self.total)}{unit}, {speed}, ETA {eta:,.0f}s"

    def summary(self, what: str = "") -> str:
        """The closing line: how much, how long, how fast (``what`` is appended).

        >>> m = Meter("export", 300, print, unit="rows")
        >>> m.done, m.started = 300, m.started - 3
        >>> m.summary("-> out/")
        'export: 300 rows in 3.0s (100/s) -> out/'
        """
        took = max(self.elapsed(), 1e-9)
        unit = f" {self.unit}" if self.unit else ""
        rate = f"{self._num(self.done / took)}{unit}/s" if self.scale != 1.0 else f"{self.done / took:,.0f}/s"
        return f"{self.label}: {self._num(self.done)}{unit} in {took:.1f}s ({rate})" + (f" {what}" if what else "")

    def elapsed(self) -> float:
        """Seconds since the work started."""
        return time.monotonic() - self.started
