"""The store client: Agent Lightning 0.3's LightningStore method set on top of the event log."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from voltbus.services.eventlog import EventLog, unsubscribe
from voltbus.services.settings import NatsSettings, Settings

from .dispatch import DispatchMethods
from .queries import ProjectorUnavailable, QueryMethods
from .resources import ResourceMethods
from .rollouts import RolloutMethods
from .spans import SpanMethods
from .waits import WaitMethods
from .workers import WorkerMethods


class Store(RolloutMethods, DispatchMethods, SpanMethods, ResourceMethods, WorkerMethods, WaitMethods, QueryMethods):
    """An event-sourced LightningStore: every write is an event, every read is folded from the log.

    A caller always sees its own writes: reads go to the stream's leader (direct get on a single
    server) after the write was acknowledged.
    """

    def __init__(self, log: EventLog, clock: Callable[[], float] = time.time) -> None:
        super().__init__(log, clock)
        self._running = {}
        self._dispatch_sub = None
        self._spare_dispatch = []
        self._known_workers = {}
        self._worker_locks = {}

    async def close(self) -> None:
        """Close the connection."""
        for msg in self._spare_dispatch:  # fetched, never claimed: back to the queue now
            with contextlib.suppress(Exception):  # else the ack wait returns them later
                await msg.nak()
        if self._dispatch_sub is not None:
            await unsubscribe(self._dispatch_sub)
        if self._latest_watch is not None:
            await unsubscribe(self._latest_watch)
        await self._close_http()
        await self.log.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def statistics(self) -> dict[str, Any]:
        """Agent Lightning's counts (rollouts, resources bundles, workers, attempts, spans) from the projector, by one
        query that sees this client's writes; span events and the streams' sizes from their stream info.

        When no projector answers, ``projector`` says why, ``total_attempts`` and ``total_spans`` are None and the log
        counts the other three (``_logged_counts``), listing every rollout's subjects: slow on a long log."""
        js, topo = self.log.js, self.topology
        ctrl, spans = await js.stream_info(topo.control_stream), await js.stream_info(topo.spans_stream)
        try:
            counts: dict[str, Any] = await self.projected_counts()
        except ProjectorUnavailable as exc:  # the log still counts three; the two only the projection gives say why not
            counts = {**await self._logged_counts(), "total_attempts": None, "total_spans": None, "projector": str(exc)}
        return {
            "name": type(self).__name__,
            **counts,
            "total_span_events": spans.state.messages,
            "control_events": ctrl.state.messages,
            "control_bytes": ctrl.state.bytes,
            "spans_bytes": spans.state.bytes,
        }

    async def _logged_counts(self) -> dict[str, int]:
        """Rollouts, resources bundles and workers counted from the control stream's subjects, each by its own narrow
        filter: the subjects a rollout's first event lands on (``.q``, ``.e``), one per bundle, one per worker. Never
        the namespace's ``>``, which makes the server match every subject and send them all; still, the rollouts' two
        filters list up to two subjects per rollout, some 30 bytes of answer each: tens of MB on a long log."""
        topo = self.topology
        origins = [await self.log.subjects(wildcard) for wildcard in topo.rollout_origins]
        return {
            "total_rollouts": len({subject.split(".")[2] for found in origins for subject in found}),
            "total_resources": len(await self.log.subjects(topo.every_resources)),
            "total_workers": len(await self.log.subjects(topo.every_worker)),
        }


async def connect(
    url: str | None = None,
    *,
    settings: NatsSettings | None = None,
    projector_url: str | None = None,
    projector_token: str | None = None,
    name: str = "voltbus-store",
) -> Store:
    """Connect a store client to the bus (``url`` overrides the settings' URL; without ``settings``, the
    environment's, as every voltbus process reads them: ``VOLTBUS_NATS__NAMESPACE`` included); ``projector_url`` is
    where its query_* methods reach the running projector (default: ``VOLTBUS_PROJECTOR__URL``,
    ``http://127.0.0.1:8765``), with ``projector_token`` (default: ``VOLTBUS_PROJECTOR__TOKEN``)."""
    environment = Settings()
    settings = settings or environment.nats  # VOLTBUS_NATS__* (namespace, credentials) apply, as in every process
    if url:
        settings = settings.model_copy(update={"url": url})
    store = Store(await EventLog.connect(settings, name=name))
    projector = environment.projector
    store.projector_url = projector_url or projector.url
    store.projector_token = projector_token or projector.token
    return store
