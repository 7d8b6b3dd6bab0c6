"""Resident memory of processes, sampled from /proc while a fault runs (peak per process, in MiB)."""

from __future__ import annotations

import threading
from pathlib import Path


def rss_mib(pid: int) -> float | None:
    """Resident set size of ``pid`` now (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Sampler:
    """Samples the RSS of named processes every ``every_s`` seconds in a thread; keeps first and peak."""

    def __init__(self, pids: dict[str, int], every_s: float = 0.1) -> None:
        self.pids, self.every_s = pids, every_s
        self.first: dict[str, float] = {}
        self.peak: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, pid in self.pids.items():
                rss = rss_mib(pid)
                if rss is not None:
                    self.first.setdefault(name, rss)
                    self.peak[name] = max(self.peak.get(name, 0.0), rss)
            self._stop.wait(self.every_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def growth(self) -> dict[str, float]:
        """Peak minus first sample, per process (MiB)."""
        return {name: round(self.peak[name] - self.first[name], 1) for name in self.peak}
