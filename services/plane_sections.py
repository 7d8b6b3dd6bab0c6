"""The sections of the one Settings object (``services/settings.py``) of the control plane's readers and watchers:
coordinator, projector (with its feeding), dashboard and store server. Import them from ``settings``."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

import platformdirs
from pydantic import BaseModel, Field, field_validator

from .sizes import memory_limit, size


class CoordinatorSettings(BaseModel):
    """The watchdog that expires attempts and parks dead letters."""

    tick_s: float = 0.5
    """Seconds between checks of every attempt in progress (timeouts are detected within one tick)."""
    restart_delay_s: float = 0.5
    """Seconds before a failed stream reader is started again."""
    worker_timeout_s: float = Field(default=60.0, ge=0)
    """Seconds without a heartbeat (or a span) from a worker, on the bus server's clock, after which the attempt it
    holds ends ``unresponsive`` and is retried per its rollout's config, whatever that config's timeouts (0: off).
    Keep it well above ``VOLTBUS_RUNNER__HEARTBEAT_S``. Attempts of a worker id whose runner restarted end at once."""
    snapshot_every_s: float = Field(default=30.0, ge=0)
    """Seconds between snapshots of the coordinator's state (its unfinished rollouts, claims and workers) in the
    bus, written only when the control stream moved (and also right after the start's catch-up and at a clean
    stop); a coordinator starts from the latest one and folds only the events after it (0: no snapshots, every
    start folds the whole control stream)."""
    snapshot_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    """Largest snapshot written, in bytes once compressed; a larger state is not snapshotted (a warning says so)."""


class Feeding(TypedDict):
    """The keyword arguments of ``services.projector.follow.project`` that the projector's settings give."""

    batch_size: int
    max_wait: float
    readers: dict[str, int]
    backlog: int


class ProjectorSettings(BaseModel):
    """The projector (DuckDB read models) and its SQL endpoint."""

    db: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("voltbus")) / "projection.duckdb")
    """The DuckDB file the projector owns (``VOLTBUS_PROJECTOR__DB``)."""
    host: str = "127.0.0.1"
    """Interface the SQL endpoint listens on."""
    port: int = 8765
    """Port of the SQL endpoint."""
    url: str = "http://127.0.0.1:8765"
    """Where clients (``voltbus sql``, the store's queries) reach the running projector."""
    batch_size: int = 2000
    """Most events applied in one transaction."""
    max_wait_s: float = 0.1
    """Longest wait to fill a batch (bounds the lag from publish to visible in SQL)."""
    span_readers: int = Field(default=1, ge=0, le=16)
    """Reader processes of the spans stream (``VOLTBUS_PROJECTOR__SPAN_READERS``): they read, decode and
    prepare a share of it each, so that the projector's process does little but DuckDB's work; 0: all in
    the projector's process. On two cores one is fastest (BENCHMARKS.md, "Projections")."""
    control_readers: int = Field(default=0, ge=0, le=16)
    """Reader processes of the control stream (``VOLTBUS_PROJECTOR__CONTROL_READERS``); 0 (the default):
    in the projector's process. On two cores, a live run's small batches cost more to hand over than to prepare
    here; a backlog gains from one, which ``reader_backlog`` gives it."""
    reader_backlog: int = Field(default=10_000, ge=0)
    """A stream with no reader processes of its own (``control_readers`` 0) gets one while it catches up on a
    backlog of at least this many messages (``VOLTBUS_PROJECTOR__READER_BACKLOG``; 0: never) whenever it opens the
    stream: at start-up (a projector that was stopped while the log grew), in ``voltbus replay``, which keeps it to
    the end, and again after a reader failed or the log was found to differ from the checkpoint. A live projector
    goes back to reading the stream itself once less than a batch is left. Not when the database holds more folded
    rollouts than the backlog has messages (the reader gets them all first). On two cores a large backlog is caught
    up on faster with a reader, a small one about as fast: the reader's start and first cut cost a fixed time
    (BENCHMARKS.md, "Projections")."""
    training_refresh_s: float = Field(default=0.2, ge=0)
    """Shortest time between two training refreshes of the live projection (``VOLTBUS_PROJECTOR__TRAINING_REFRESH_S``):
    the training rows of attempts that end meanwhile are computed together, in one refresh of a few statements,
    instead of one refresh per commit (BENCHMARKS.md, "Projections"). A query waiting for both streams (training data)
    waits for them; 0: each in the commit that ends the attempt or brings its telemetry."""
    duckdb_threads: int = Field(default=1, ge=0, le=1024)
    """DuckDB's worker threads for the projector's database (``VOLTBUS_PROJECTOR__DUCKDB_THREADS``; 0: DuckDB's
    default, one per core). 1 by default: the projector's batches are too small for DuckDB to split, and idle
    workers cost CPU in every statement (a live run's small commits take less CPU with 1: BENCHMARKS.md,
    "Projections"). SQL over the projector's endpoint shares the setting: raise it where large queries
    on a live projection matter more than ingest."""
    duckdb_memory_limit: str = "1GiB"
    """Most memory DuckDB's buffer manager holds for the projector's database
    (``VOLTBUS_PROJECTOR__DUCKDB_MEMORY_LIMIT``): a size (``512MiB``, ``2GB``, at least 64 MiB) or a share of the
    machine's memory (``25%``; DuckDB's own default is ``80%``). The projector's writes and its endpoint's queries
    share it; ``voltbus replay`` and ``voltbus sql --db`` use it too. Past it DuckDB evicts cached table blocks and
    spills large queries to ``<db>.tmp``; a query that cannot fit gets 503 ``out_of_memory``, a batch that cannot is
    applied again after a pause, with an error naming this setting (docs/projections.md, "DuckDB's memory")."""
    duckdb_checkpoint_threshold: str = "256MiB"
    """Size of the write-ahead log past which DuckDB checkpoints the projector's database
    (``VOLTBUS_PROJECTOR__DUCKDB_CHECKPOINT_THRESHOLD``; DuckDB's own default is ``16MiB``). A checkpoint writes the
    indexes of every table it touches whole (duckdb/duckdb#24848): at 1,000,000 rollouts one cost 0.7–10.6 s of the
    writer's time, about every 100 commits at 16 MiB (BENCHMARKS.md, issue 25). A larger log makes them rarer; it is
    replayed when the projector starts (about 1.5 s for 100 MiB at 1,000,000 rollouts) and its changes stay in
    DuckDB's memory until the checkpoint. ``voltbus replay`` uses it too."""
    max_rows: int = 100_000
    """Most rows one SQL query returns over the endpoint (a clear error past it)."""
    max_result_bytes: int = Field(default=64 << 20, ge=1)
    """Most bytes (Arrow) one SQL answer holds, over the endpoint or ``voltbus sql --db`` (a clear error past it)."""
    sql_timeout_s: float = Field(default=30.0, gt=0)
    """Longest one SQL query runs, over the endpoint or ``voltbus sql --db``: it is then interrupted and refused."""
    sql_slots: int = Field(default=4, ge=1, le=64)
    """SQL queries the endpoint runs at once; one more waits up to 5 s for a slot, then gets 503 (the projector's
    own writes never wait for them)."""
    token: str | None = None
    """Bearer token required by POST /sql (generated with the bus users by voltbus up / compose). None: no token
    (the endpoint then binds loopback only)."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names the endpoint answers besides loopback ones and ``host`` (a ``Host`` header naming anything else
    gets 400: a web page cannot reach it through DNS rebinding), e.g. ``["projector"]`` in compose; ``*.domain``
    patterns allowed."""

    @field_validator("duckdb_memory_limit")
    @classmethod
    def _memory_limit(cls, value: str) -> str:
        """A size DuckDB parses, of at least ``MIN_MEMORY``, or a percentage in (0, 100]."""
        return memory_limit(value)

    @field_validator("duckdb_checkpoint_threshold")
    @classmethod
    def _checkpoint_threshold(cls, value: str) -> str:
        """A size with a unit, as DuckDB parses it."""
        return size(value, "checkpoint threshold")

    @property
    def auth_headers(self) -> dict[str, str]:
        """The headers a client of the SQL endpoint sends: the token, when there is one."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def readers(self) -> dict[str, int]:
        """Reader processes per stream."""
        return {"control": self.control_readers, "spans": self.span_readers}

    @property
    def forks(self) -> bool:
        """Whether reader processes may start (readers of a stream's own, or one for a backlog): the fork server
        is then started once, beforehand."""
        return any(self.readers.values()) or self.reader_backlog > 0

    @property
    def feeding(self) -> Feeding:
        """``services.projector.follow.project``'s keyword arguments from these settings: batches, readers, backlog."""
        return {
            "batch_size": self.batch_size,
            "max_wait": self.max_wait_s,
            "readers": self.readers,
            "backlog": self.reader_backlog,
        }


class DashboardSettings(BaseModel):
    """The dashboard (``voltbus dashboard``): a live web page over the projector's SQL endpoint."""

    host: str = "127.0.0.1"
    """Interface the dashboard listens on."""
    port: int = 8780
    """Port of the dashboard (``VOLTBUS_DASHBOARD__PORT``)."""
    projector_url: str | None = None
    """Where the dashboard reaches the projector's ``/sql``; None: ``projector.url``."""
    timeout_s: float = Field(default=5.0, gt=0)
    """Seconds one query to the projector may take before the page says it does not answer."""
    poll_s: float = Field(default=2.0, gt=0)
    """Seconds between the page's refreshes."""
    stale_s: float = Field(default=30.0, gt=0)
    """Seconds without a heartbeat after which the page shows a runner as stale (stopped or hung): counted apart
    and folded under the live ones, never listed as idle. Keep it above ``VOLTBUS_RUNNER__HEARTBEAT_S``."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names the page answers besides loopback ones and ``host`` (a ``Host`` header naming anything else gets
    400, so a web page cannot read the projection through DNS rebinding); ``*.domain`` patterns allowed."""
    token: str | None = None
    """Token of the page (``VOLTBUS_DASHBOARD__TOKEN``; ``voltbus up`` and compose generate one): a browser opens
    ``/?token=<token>`` once and keeps it in an HttpOnly, SameSite=Strict cookie; scripts send ``Authorization:
    Bearer <token>``. None: no token, and the dashboard refuses to listen beyond loopback."""


class StoreServerSettings(BaseModel):
    """``voltbus store-server``: Agent Lightning 0.3's HTTP store API and OTLP/HTTP trace ingest over the log."""

    host: str = "127.0.0.1"
    """Interface the store server listens on."""
    port: int = 4747
    """Port of the store server (Agent Lightning's default)."""
    token: str | None = None
    """Token every route but ``/v1/agl/health`` needs: ``Authorization: Bearer <token>``, or HTTP Basic with the token
    as password (``http://agl:<token>@host:4747``, how Agent Lightning's client carries it). None: no token, and the
    store server refuses to listen beyond loopback."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names it answers besides loopback ones and ``host`` (others get 400: no DNS rebinding)."""
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """Largest request body (a JSON call or an OTLP export, after gzip); past it the answer is 413."""
    max_wait_s: float = Field(default=30.0, gt=0)
    """Longest ``wait_for_rollouts`` one request may ask for (a longer ``timeout``, or none, waits this long)."""
