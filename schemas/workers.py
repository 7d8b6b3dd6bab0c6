"""Worker status reports: what a runner is doing and its host's health (control stream).

Fields follow Agent Lightning's ``Worker`` and its ``system_snapshot`` heartbeat stats.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .base import Event, Id, Timestamp

WorkerStatus = Literal["busy", "idle", "unknown"]
"""What a worker is doing, as Agent Lightning names it."""


class GpuStats(msgspec.Struct, frozen=True, kw_only=True):
    """Health of one GPU."""

    gpu: str | int
    """GPU name or index."""
    util_pct: float | None = None
    """Utilisation, percent."""
    mem_used_mb: float | None = None
    """Memory used, MB."""
    mem_total_mb: float | None = None
    """Memory installed, MB."""
    temp_c: float | None = None
    """Temperature, degrees Celsius."""


class HeartbeatStats(msgspec.Struct, frozen=True, kw_only=True):
    """A host snapshot sent with a heartbeat; every field is optional."""

    cpu_name: str | None = None
    """CPU model name."""
    cpu_cores: int | None = None
    """Physical cores."""
    cpu_threads: int | None = None
    """Logical cores."""
    cpu_usage_pct: float | None = None
    """CPU usage, percent."""
    mem_used_gb: float | None = None
    """Memory used, GB."""
    mem_total_gb: float | None = None
    """Memory installed, GB."""
    mem_pct: float | None = None
    """Memory used, percent."""
    disk_used_gb: float | None = None
    """Disk used, GB."""
    disk_total_gb: float | None = None
    """Disk size, GB."""
    disk_pct: float | None = None
    """Disk used, percent."""
    bytes_sent_mb: float | None = None
    """Network bytes sent since boot, MB."""
    bytes_recv_mb: float | None = None
    """Network bytes received since boot, MB."""
    host: str | None = None
    """Host name."""
    os: str | None = None
    """Operating system."""
    gpus: list[GpuStats] = []
    """One entry per GPU, when GPU stats were collected."""
    extra: dict[str, Any] = {}
    """Every key a caller sent that is none of the fields above, with its JSON value (Agent Lightning's heartbeat
    stats are a free dict: ``update_worker(w, heartbeat_stats={...})`` keeps them all; see ``of``)."""

    @classmethod
    def of(cls, given: Any) -> HeartbeatStats:
        """Stats from a dict as Agent Lightning's callers send it: the known keys typed, the rest kept in ``extra``.

        >>> HeartbeatStats.of({"cpu_cores": 4, "queue_depth": 7}).extra
        {'queue_depth': 7}
        """
        if isinstance(given, HeartbeatStats):
            return given
        fields = set(cls.__struct_fields__) - {"extra"}
        known = {k: v for k, v in dict(given).items() if k in fields}
        extra = {str(k): v for k, v in dict(given).items() if k not in fields}
        return msgspec.convert({**known, "extra": extra}, cls)

    def flat(self) -> dict[str, Any]:
        """The stats as one dict again: the known fields and the ``extra`` keys side by side."""
        return HeartbeatStats.flatten(msgspec.to_builtins(self))

    @staticmethod
    def flatten(stats: dict[str, Any]) -> dict[str, Any]:
        """A stats dict as stored (``extra`` nested) made flat, as its caller sent it."""
        extra = stats.pop("extra", None) or {}
        return {**stats, **extra}


class WorkerStatusReported(Event, frozen=True, kw_only=True):
    """A worker's full status snapshot: what it does, its assignment, its host health and timestamps."""

    worker_id: Id
    """The worker, e.g. ``Worker-0``; also a subject token."""
    status: WorkerStatus = "unknown"
    """What it is doing."""
    current_rollout_id: Id | None = None
    """The rollout it is running, when busy."""
    current_attempt_id: Id | None = None
    """The attempt it is running, when busy."""
    heartbeat_stats: HeartbeatStats | None = None
    """Host snapshot, when sent with a heartbeat."""
    at: Timestamp
    """When the report was made."""
    last_heartbeat_time: Timestamp | None = None
    """Last heartbeat (``update_worker``) seen so far."""
    last_dequeue_time: Timestamp | None = None
    """Last time the worker asked for work."""
    last_busy_time: Timestamp | None = None
    """Last time the worker became busy."""
    last_idle_time: Timestamp | None = None
    """Last time the worker became idle (or unknown)."""
    session_id: Id | None = None
    """voltbus addition: the runner process that holds this worker id, new at each start and kept by every later
    report; the coordinator ends every attempt the worker claimed before its current session began."""
